//! Integration tests of castack live in `tests/`; this library is empty.
