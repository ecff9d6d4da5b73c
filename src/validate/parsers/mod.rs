//! Parsers of acceptance-tool outputs (filled by the parsers work).
