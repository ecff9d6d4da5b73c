//! Acceptance results: the data the report renders (filled by the report work).
