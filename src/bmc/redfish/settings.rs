//! BIOS settings as vendors ship them: the values in effect (the `Bios` resource) and
//! the values queued for the next reset (its `@Redfish.Settings` → `SettingsObject`:
//! `Bios/Settings` on Dell and the DMTF mockups, `bios/settings/` on HPE,
//! `Bios/Pending` on Lenovo).
//!
//! Stage: observe/apply (BMC). Input: a system's path. Output: [`BiosSettings`] (in
//! effect, queued, where writes go, which apply times the BMC offers) and the
//! [`PendingSetting`]s a blueprint does not want.
//!
//! Why it matters: a BMC applies every queued value at the next reset, whoever asked
//! for it. A value someone else queued and the blueprint does not want would be
//! applied by toolkit's own restart, so toolkit overwrites it with the value in
//! effect first ([`Redfish::settle_bios`]) and checks it is gone before any reset
//! ([`Redfish::refuse_unwanted_pending`]).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Redfish, link, same_value};
use crate::bmc::BmcError;
use crate::resource::api::value_text;

/// The BIOS of one system: in effect and queued.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BiosSettings {
    /// The `Bios` resource's path (followed from the system's `Bios` link).
    pub uri: String,
    /// Where writes go: the `SettingsObject` when the BMC names one, else the `Bios`
    /// resource itself (the Redfish rule for resources without `@Redfish.Settings`).
    pub settings_uri: String,
    /// Attributes in effect.
    pub current: BTreeMap<String, Value>,
    /// Attributes queued for the next reset whose value differs from the one in
    /// effect. Dell lists only queued attributes in its settings object, HPE and the
    /// DMTF mockups list all of them: comparing makes both mean the same.
    pub pending: BTreeMap<String, Value>,
    /// `SupportedApplyTimes` of `@Redfish.Settings` (empty when the BMC does not say).
    pub apply_times: Vec<String>,
}

/// An attribute queued for the next reset with a value the blueprint does not want.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PendingSetting {
    /// Attribute name.
    pub name: String,
    /// The queued value.
    pub pending: Value,
    /// The value in effect; `None` when the BIOS does not report the attribute.
    pub current: Option<Value>,
    /// The value the blueprint wants; `None` when it does not name the attribute.
    pub wanted: Option<Value>,
}

impl std::fmt::Display for PendingSetting {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = self.current.as_ref().map_or_else(|| "not reported".to_owned(), value_text);
        write!(formatter, "`{}` = `{}` (in effect: `{current}`)", self.name, value_text(&self.pending))
    }
}

impl BiosSettings {
    /// Reads the `Bios` resource at `uri` and its settings object (`None` when it
    /// has none, or it is the resource itself).
    #[must_use]
    pub fn read(uri: &str, bios: &Value, settings: Option<&Value>) -> Self {
        let current = attributes(bios);
        let pending = settings
            .map(attributes)
            .unwrap_or_default()
            .into_iter()
            .filter(|(name, value)| current.get(name).is_none_or(|have| !same_value(have, value)))
            .collect();
        let apply_times = bios
            .pointer("/@Redfish.Settings/SupportedApplyTimes")
            .and_then(Value::as_array)
            .map(|times| times.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        Self {
            uri: uri.to_owned(),
            settings_uri: link(bios, "/@Redfish.Settings/SettingsObject").unwrap_or_else(|| uri.to_owned()),
            current,
            pending,
            apply_times,
        }
    }

    /// The value after the next reset: queued, else in effect.
    #[must_use]
    pub fn after_reset(&self, name: &str) -> Option<&Value> {
        self.pending.get(name).or_else(|| self.current.get(name))
    }

    /// Queued values that `wanted` (the blueprint's attributes for this node) does not
    /// ask for: attributes it does not name, and those it names with another value.
    #[must_use]
    pub fn unwanted(&self, wanted: &BTreeMap<String, Value>) -> Vec<PendingSetting> {
        self.pending
            .iter()
            .filter(|(name, value)| wanted.get(*name).is_none_or(|want| !same_value(want, value)))
            .map(|(name, value)| PendingSetting {
                name: name.clone(),
                pending: value.clone(),
                current: self.current.get(name).cloned(),
                wanted: wanted.get(name).cloned(),
            })
            .collect()
    }

    /// The write that leaves exactly `wanted` queued: each wanted attribute whose
    /// value after the next reset is not the wanted one, and each other queued
    /// attribute set back to its value in effect (an attribute the BIOS does not
    /// report in effect cannot be set back this way, and stays queued).
    #[must_use]
    pub fn write_for(&self, wanted: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
        let mut body: BTreeMap<String, Value> = wanted
            .iter()
            .filter(|(name, want)| self.after_reset(name).is_none_or(|value| !same_value(want, value)))
            .map(|(name, want)| (name.clone(), want.clone()))
            .collect();
        for setting in self.unwanted(wanted) {
            if setting.wanted.is_none()
                && let Some(current) = setting.current
            {
                body.insert(setting.name, current);
            }
        }
        body
    }
}

/// The PATCH body for a settings object: the attributes, and
/// `@Redfish.SettingsApplyTime` `OnReset` where the BMC offers it (Dell creates the
/// configuration job from it; without it the values wait for a job nobody creates).
#[must_use]
pub fn settings_body(attributes: &BTreeMap<String, Value>, apply_times: &[String]) -> Value {
    let mut body = Map::new();
    body.insert("Attributes".to_owned(), json!(attributes));
    if apply_times.iter().any(|time| time == "OnReset") {
        body.insert("@Redfish.SettingsApplyTime".to_owned(), json!({ "ApplyTime": "OnReset" }));
    }
    Value::Object(body)
}

fn attributes(value: &Value) -> BTreeMap<String, Value> {
    value
        .get("Attributes")
        .and_then(Value::as_object)
        .map(|attributes| attributes.iter().map(|(name, value)| (name.clone(), value.clone())).collect())
        .unwrap_or_default()
}

impl Redfish {
    /// The system's BIOS in effect and queued, following `Bios` and
    /// `@Redfish.Settings/SettingsObject` links.
    ///
    /// # Errors
    /// [`BmcError::Unsupported`] without a `Bios` resource; [`BmcError::Decode`]
    /// when it has no `Attributes`; or see [`BmcError`].
    pub async fn bios_settings(&self, system: &str) -> Result<BiosSettings, BmcError> {
        let uri = self.bios_path(system).await?;
        let bios = self.get(&uri).await?;
        if bios.get("Attributes").and_then(Value::as_object).is_none() {
            return Err(BmcError::Decode {
                host: self.host().to_owned(),
                url: uri,
                reason: "no `Attributes` object".to_owned(),
            });
        }
        let settings_uri = link(&bios, "/@Redfish.Settings/SettingsObject");
        let queued = match &settings_uri {
            Some(path) if path.trim_end_matches('/') != uri.trim_end_matches('/') => Some(self.get(path).await?),
            _ => None,
        };
        Ok(BiosSettings::read(&uri, &bios, queued.as_ref()))
    }

    /// Writes `attributes` to the settings object (`OnReset` where offered).
    ///
    /// # Errors
    /// See [`BmcError`]; the BMC's `@Message.ExtendedInfo` messages are in it.
    pub async fn write_bios_settings(
        &self,
        settings: &BiosSettings,
        attributes: &BTreeMap<String, Value>,
    ) -> Result<(), BmcError> {
        tracing::info!(host = %self.host(), uri = %settings.settings_uri, count = attributes.len(), "BIOS settings");
        self.patch(&settings.settings_uri, &settings_body(attributes, &settings.apply_times)).await
    }

    /// Leaves exactly `wanted` queued: writes the wanted attributes that the next
    /// reset would not bring, overwrites every other queued value with the value in
    /// effect, then reads the BIOS again. Returns the unwanted values it overwrote.
    ///
    /// # Errors
    /// [`BmcError::UnwantedPending`] when unwanted values are still queued after
    /// the write (a BMC that ignores it, or an attribute it cannot set back); or see
    /// [`BmcError`].
    pub async fn settle_bios(
        &self,
        system: &str,
        wanted: &BTreeMap<String, Value>,
    ) -> Result<Vec<PendingSetting>, BmcError> {
        let settings = self.bios_settings(system).await?;
        let overwritten = settings.unwanted(wanted);
        let body = settings.write_for(wanted);
        if body.is_empty() && overwritten.is_empty() {
            return Ok(overwritten);
        }
        if !body.is_empty() {
            self.write_bios_settings(&settings, &body).await?;
        }
        self.refuse_unwanted_pending(system, wanted).await?;
        for setting in &overwritten {
            tracing::info!(host = %self.host(), setting = %setting, "queued BIOS value the blueprint does not want overwritten");
        }
        Ok(overwritten)
    }

    /// Refuses (an error) when the BMC has values queued for the next reset that
    /// `wanted` does not ask for: the check before any reset toolkit sends.
    ///
    /// # Errors
    /// [`BmcError::UnwantedPending`]; or see [`BmcError`]. A system without a `Bios`
    /// resource has nothing queued.
    pub async fn refuse_unwanted_pending(
        &self,
        system: &str,
        wanted: &BTreeMap<String, Value>,
    ) -> Result<(), BmcError> {
        let settings = match self.bios_settings(system).await {
            Ok(settings) => settings,
            Err(BmcError::Unsupported { .. }) => return Ok(()),
            Err(error) => return Err(error),
        };
        let unwanted = settings.unwanted(wanted);
        if unwanted.is_empty() {
            return Ok(());
        }
        Err(BmcError::UnwantedPending {
            host: self.host().to_owned(),
            settings: unwanted.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
            settings_uri: settings.settings_uri,
        })
    }
}

#[cfg(test)]
mod tests;
