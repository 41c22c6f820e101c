SET checkpoint_interval = '10s'; SET delivery = 'exactly_once'; SET batch_size = 100; SET idle_timeout = '1s'; SET checkpoint_retain = 3; SET channel_capacity = 4; SET unknown_option = 1;
