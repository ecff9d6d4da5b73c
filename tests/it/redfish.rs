//! Integration tests: redfish.
