//! (filled in by the provisioning work)
