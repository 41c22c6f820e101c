SET checkpoint_interval = '0s'; SET checkpoint_alignment_timeout = '300000000000y'; SET batch_size = 0; SET checkpoint_retain = -1; SET delivery = 'maybe';
