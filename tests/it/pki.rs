//! A throwaway certificate authority made with the real `openssl`, for the TLS tests
//! of the Redfish and Kubernetes clients: a CA per test, leaf certificates it signs.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::redfish::system_program;

/// EC P-256 keys, unencrypted: quick to make, accepted by rustls.
const EC_KEY: [&str; 5] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

/// A CA whose `ca.key` and `ca.pem` live in `dir`.
pub(crate) struct TestCa {
    openssl: PathBuf,
    dir: PathBuf,
}

impl TestCa {
    /// Makes the CA (`subject` like `/CN=test CA`); `None` when openssl is missing
    /// and the developer skips missing tools ([`crate::support::cannot_run`]).
    pub(crate) fn new(dir: &Path, subject: &str) -> Option<Self> {
        let ca = Self { openssl: system_program("openssl", "openssl")?, dir: dir.to_owned() };
        ca.run(
            &[&["req", "-x509"][..], &EC_KEY, &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", subject]]
                .concat(),
        );
        Some(ca)
    }

    /// Issues `<name>.key` and `<name>.pem` for `subject`, with `extensions` (lines of
    /// an openssl extension file: subjectAltName, extendedKeyUsage…) beside
    /// `basicConstraints=CA:FALSE`.
    pub(crate) fn issue(&self, name: &str, subject: &str, extensions: &str) {
        let (key, csr, pem, cnf) =
            (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"), format!("{name}.cnf"));
        self.run(&[&["req"][..], &EC_KEY, &["-keyout", &key, "-out", &csr, "-subj", subject]].concat());
        std::fs::write(self.dir.join(&cnf), format!("basicConstraints=CA:FALSE\n{extensions}"))
            .expect("extension file");
        self.run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &cnf,
        ]);
    }

    fn run(&self, args: &[&str]) {
        let output = Command::new(&self.openssl).args(args).current_dir(&self.dir).output().expect("openssl runs");
        assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    }
}
