//! Report: results rendered as HTML, JUnit XML, JSON and Markdown (filled by the report work).
