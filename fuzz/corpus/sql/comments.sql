-- comment only
/* block */ SHOW SOURCES; /* unterminated
