//! The BMC's event logs: the system's and its manager's `LogServices` (the SEL and the
//! BMC's own events), their entries within a time window, for a faulty-host report.
//!
//! Stage: observe (read only). Input: a system path ([`Redfish::system`]). Output:
//! [`EventLog`]: the entries created within the window, oldest first, and the services
//! that could not be read with why.
//!
//! Every resource is reached by the links the BMC gives (`LogServices` of the system and
//! of each `Links.ManagedBy` manager, each service's `Entries`, each member), never by
//! an id guessed from a vendor's habits. Collections come in pages (`Members@odata.nextLink`);
//! a page that brings no member not seen yet ends the walk, so a server that ignores the
//! `$skiptoken` (answering the first page again) costs one request more, not a loop; a
//! page that cannot be read keeps the entries read before it and names the service as unread.

use std::collections::BTreeSet;

use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

use super::BmcError;
use super::redfish::{Redfish, link, members, string_at};

/// Pages of one entries collection read at most: a BMC keeps a few thousand entries
/// (hundreds per page), and the window is the newest part.
const MAX_PAGES: usize = 64;

/// One log entry, as the BMC wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogEntry {
    /// The log service it is in (`/redfish/v1/Systems/1/LogServices/SEL`).
    pub service: String,
    /// The entry's path.
    pub uri: String,
    /// `Created` (RFC 3339, the BMC's clock).
    pub created: String,
    /// `Severity` (`OK`, `Warning`, `Critical`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    /// `EntryType` (`SEL`, `Event`, `Oem`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_type: Option<String>,
    /// `SensorType` of a SEL entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sensor_type: Option<String>,
    /// `EntryCode` of a SEL entry (`Upper Critical - going high`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_code: Option<String>,
    /// `MessageId` (a registry id, or the SEL's event data).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// `Message`.
    pub message: String,
}

/// The entries of every log service within the window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EventLog {
    /// Log services read (paths).
    pub services: Vec<String>,
    /// Entries created within the window, oldest first.
    pub entries: Vec<LogEntry>,
    /// Entries outside the window, or without a `Created` time, left out.
    pub left_out: usize,
    /// Log services (or collections) that could not be read, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<(String, String)>,
}

/// A member of an entries page: the entry itself (members expanded inline), or only its
/// link when the BMC lists links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    /// Inline, read.
    Entry(Box<LogEntry>),
    /// Inline but without `Created`: it cannot be placed in time.
    Undated(String),
    /// A link to read.
    Link(String),
}

/// The members of one page of an entries collection and the next page's link.
#[must_use]
pub fn page(service: &str, page: &Value) -> (Vec<Member>, Option<String>) {
    let found = page
        .get("Members")
        .and_then(Value::as_array)
        .map(|members| members.iter().filter_map(|member| member_of(service, member)).collect())
        .unwrap_or_default();
    let next = string_at(page, "/Members@odata.nextLink").or_else(|| string_at(page, "/@odata.nextLink"));
    (found, next)
}

fn member_of(service: &str, member: &Value) -> Option<Member> {
    let uri = string_at(member, "/@odata.id")?;
    // A member with a message or a type is the entry itself; one with only its link is not.
    let inline = member.get("Message").is_some() || member.get("EntryType").is_some();
    if !inline {
        return Some(Member::Link(uri));
    }
    Some(entry(service, &uri, member).map_or(Member::Undated(uri), |entry| Member::Entry(Box::new(entry))))
}

/// A log entry document; `None` without a `Created` time.
#[must_use]
pub fn entry(service: &str, uri: &str, document: &Value) -> Option<LogEntry> {
    let created = string_at(document, "/Created")?;
    Some(LogEntry {
        service: service.to_owned(),
        uri: uri.to_owned(),
        created,
        severity: string_at(document, "/Severity"),
        entry_type: string_at(document, "/EntryType"),
        sensor_type: string_at(document, "/SensorType"),
        entry_code: string_at(document, "/EntryCode"),
        message_id: string_at(document, "/MessageId"),
        message: string_at(document, "/Message").unwrap_or_default(),
    })
}

/// Whether `entry` was created within `[from, to]`; an unreadable time is outside.
#[must_use]
pub fn within(entry: &LogEntry, from: Timestamp, to: Timestamp) -> bool {
    entry.created.parse::<Timestamp>().is_ok_and(|created| created >= from && created <= to)
}

impl Redfish {
    /// The entries of the system's and its managers' log services created within
    /// `[from, to]`. A service that cannot be read is recorded in [`EventLog::unread`]
    /// and the others are still read.
    ///
    /// # Errors
    /// The system itself cannot be read.
    pub async fn event_log(&self, system: &str, from: Timestamp, to: Timestamp) -> Result<EventLog, BmcError> {
        let document = self.get(system).await?;
        let mut log = EventLog::default();
        let managers = document.pointer("/Links/ManagedBy").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut owners = vec![document];
        for manager in managers.iter().filter_map(|manager| string_at(manager, "/@odata.id")) {
            match self.get(&manager).await {
                Ok(value) => owners.push(value),
                Err(error) => log.unread.push((manager, error.to_string())),
            }
        }
        for owner in &owners {
            let Some(collection) = link(owner, "/LogServices") else { continue };
            let services = match self.get(&collection).await {
                Ok(value) => members(&value),
                Err(error) => {
                    log.unread.push((collection, error.to_string()));
                    continue;
                }
            };
            for service in services {
                if let Err(error) = self.read_service(&service, from, to, &mut log).await {
                    log.unread.push((service.clone(), error.to_string()));
                }
                log.services.push(service);
            }
        }
        log.entries.sort_by(|a, b| {
            let time = |entry: &LogEntry| entry.created.parse::<Timestamp>().ok();
            time(a).cmp(&time(b)).then_with(|| a.uri.cmp(&b.uri))
        });
        Ok(log)
    }

    async fn read_service(
        &self,
        service: &str,
        from: Timestamp,
        to: Timestamp,
        log: &mut EventLog,
    ) -> Result<(), BmcError> {
        let Some(entries) = link(&self.get(service).await?, "/Entries") else { return Ok(()) };
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut next = Some(entries);
        for _ in 0..MAX_PAGES {
            let Some(path) = next.take() else { break };
            let (found, following) = page(service, &self.get(&path).await?);
            let mut new = 0;
            for member in found {
                let uri = match &member {
                    Member::Entry(entry) => entry.uri.clone(),
                    Member::Undated(uri) | Member::Link(uri) => uri.clone(),
                };
                if !seen.insert(uri.clone()) {
                    continue;
                }
                new += 1;
                let read = match member {
                    Member::Entry(entry) => Some(*entry),
                    Member::Undated(_) => None,
                    Member::Link(uri) => entry(service, &uri, &self.get(&uri).await?),
                };
                match read {
                    Some(entry) if within(&entry, from, to) => log.entries.push(entry),
                    _ => log.left_out += 1,
                }
            }
            if new == 0 {
                break;
            }
            next = following;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mockup(path: &str) -> Value {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/support/mockups/dmtf-rackmount1")
            .join(path)
            .join("index.json");
        serde_json::from_str(&std::fs::read_to_string(file).expect("mockup")).expect("JSON")
    }

    #[test]
    fn a_sel_page_with_members_inline_and_a_next_link() {
        let service = "/redfish/v1/Systems/437XR1138R2/LogServices/Log1";
        let (members, next) = page(service, &mockup("Systems/437XR1138R2/LogServices/Log1/Entries"));
        assert_eq!(next.as_deref(), Some("/redfish/v1/Systems/437XR1138R2/LogServices/Log1/Entries?$skiptoken=2"));
        let Member::Entry(first) = &members[0] else { panic!("inline: {members:?}") };
        assert_eq!(first.created, "2012-03-07T14:44:00Z");
        assert_eq!(first.entry_type.as_deref(), Some("SEL"));
        assert_eq!(first.sensor_type.as_deref(), Some("Temperature"));
        assert_eq!(first.entry_code.as_deref(), Some("Upper Critical - going high"));
        assert_eq!(
            (first.message.as_str(), first.message_id.as_deref()),
            ("Temperature threshold exceeded", Some("0x592A28"))
        );
        assert_eq!(members.len(), 2);
    }

    #[test]
    fn links_are_read_later_and_undated_entries_cannot_be_placed() {
        let listed = serde_json::json!({
            "Members": [
                { "@odata.id": "/redfish/v1/Managers/BMC/LogServices/Log/Entries/1" },
                { "@odata.id": "/x/2", "EntryType": "Oem", "Message": "no time" }
            ],
            "Members@odata.nextLink": "/x?page=2"
        });
        let (members, next) = page("/s", &listed);
        assert_eq!(
            members,
            [
                Member::Link("/redfish/v1/Managers/BMC/LogServices/Log/Entries/1".to_owned()),
                Member::Undated("/x/2".to_owned())
            ]
        );
        assert_eq!(next.as_deref(), Some("/x?page=2"));
        let one = entry("/s", "/e/1", &mockup("Managers/BMC/LogServices/Log/Entries/1")).expect("dated");
        assert_eq!(one.message_id.as_deref(), Some("Event.1.0.TempWayTooHot"));
        let at = |text: &str| text.parse::<Timestamp>().expect("time");
        assert!(within(&one, at("2012-03-07T14:00:00Z"), at("2012-03-07T15:00:00Z")));
        assert!(!within(&one, at("2012-03-07T14:44:01Z"), at("2012-03-07T15:00:00Z")));
        // The BMC's clock with an offset is the same instant.
        let offset = LogEntry { created: "2012-03-07T20:44:00+06:00".to_owned(), ..one };
        assert!(within(&offset, at("2012-03-07T14:44:00Z"), at("2012-03-07T14:44:00Z")));
    }
}
