//! Storage drivers behind one trait. (SQLite and Redis land here.)
