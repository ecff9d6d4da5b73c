//! Checks of the acceptance section: NCCL efficiency, validator selection and
//! threshold overrides.

use std::collections::HashMap;

use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::AcceptanceMode;
use crate::diagnostic::{Diagnostic, Diagnostics};

pub(super) fn check(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    efficiency(loaded, out);
    validators(loaded, out);
}

fn efficiency(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let Some(efficiency) = loaded.blueprint.acceptance.nccl_efficiency else { return };
    if !(efficiency > 0.0 && efficiency <= 1.0) {
        out.push(
            Diagnostic::error(
                "invalid-nccl-efficiency",
                format!("`nccl_efficiency: {efficiency}` is not a fraction in (0, 1]"),
            )
            .at(&loaded.source, "acceptance.nccl_efficiency")
            .help("give the fraction of theoretical bus bandwidth NCCL must reach, e.g. `0.8`"),
        );
    }
}

fn validators(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let acceptance = &loaded.blueprint.acceptance;
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (index, validator) in acceptance.validators.iter().enumerate() {
        if let Some(first) = seen.get(validator.id.as_str()) {
            out.push(
                Diagnostic::error("duplicate-validator", format!("validator `{}` is listed twice", validator.id))
                    .at(&loaded.source, format!("acceptance.validators[{index}].id"))
                    .help(format!("merge its thresholds into `validators[{first}]`")),
            );
        } else {
            seen.insert(&validator.id, index);
        }
        for (name, value) in &validator.thresholds {
            if !value.is_finite() {
                out.push(
                    Diagnostic::error("invalid-threshold", format!("threshold `{name}` is `{value}`"))
                        .at(&loaded.source, format!("acceptance.validators[{index}].thresholds.{name}"))
                        .help("give a finite number"),
                );
            }
        }
    }
    if acceptance.mode == AcceptanceMode::Explicit && acceptance.validators.iter().all(|v| v.skip) {
        out.push(
            Diagnostic::error("no-validators", "`mode: explicit` runs only the listed validators, and none is listed")
                .at(&loaded.source, "acceptance.mode")
                .help("list validators under `validators:`, or use `mode: auto`"),
        );
    }
}
