//! Integration tests: render_network.
