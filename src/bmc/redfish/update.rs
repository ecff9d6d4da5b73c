//! Firmware updates through the BMC's `UpdateService`: the image checked against its
//! SHA-256, handed to the BMC (`SimpleUpdate` with the image's URL, or a multipart
//! push of the image where the service advertises `MultipartHttpPushUri`), and the
//! task the BMC starts followed to its end.
//!
//! Stage: apply (BMC). Input: a connected [`Redfish`], the system, a component
//! (`BIOS`, `BMC`, or a `FirmwareInventory` member's `Id`) and a [`FirmwareImage`].
//! Output: an [`Update`] (how it was sent, the task, the apply time asked for), or an
//! [`UpdateError`]. Nothing is sent to the BMC before the image's checksum matched.
//!
//! The apply time: where the service lists `OnReset` among the apply times it supports
//! (`@Redfish.OperationApplyTimeSupport`), it is asked for, so the new firmware runs
//! from the reset the rollout makes after the update, when the node is drained;
//! otherwise the BMC applies it as it does (`Immediate` for most BMC firmware).

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use thiserror::Error;

use super::{Redfish, Reply, link, members, string_at};
use crate::bmc::BmcError;

/// An image and its checksum, as a hardware profile declares them.
#[derive(Debug, Clone, Copy)]
pub struct FirmwareImage<'a> {
    /// `http(s)://` URL the image is fetched from.
    pub uri: &'a str,
    /// Expected SHA-256, lower-case hex.
    pub sha256: &'a str,
}

/// What the service offers for updates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateService {
    /// `#UpdateService.SimpleUpdate` target.
    pub simple_update: Option<String>,
    /// `TransferProtocol@Redfish.AllowableValues` of SimpleUpdate (empty: not said).
    pub protocols: Vec<String>,
    /// `MultipartHttpPushUri`.
    pub multipart_push: Option<String>,
    /// Apply times the service supports (`Immediate`, `OnReset`, …; empty: not said).
    pub apply_times: Vec<String>,
}

impl UpdateService {
    /// Reads the service document.
    #[must_use]
    pub fn from_document(service: &Value) -> Self {
        let strings = |pointer: &str| -> Vec<String> {
            service
                .pointer(pointer)
                .and_then(Value::as_array)
                .map(|values| values.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default()
        };
        let mut apply_times =
            strings("/Actions/#UpdateService.SimpleUpdate/@Redfish.OperationApplyTimeSupport/SupportedValues");
        for time in strings("/HttpPushUriOptions/HttpPushUriApplyTime/ApplyTime@Redfish.AllowableValues") {
            if !apply_times.contains(&time) {
                apply_times.push(time);
            }
        }
        Self {
            simple_update: string_at(service, "/Actions/#UpdateService.SimpleUpdate/target"),
            protocols: strings("/Actions/#UpdateService.SimpleUpdate/TransferProtocol@Redfish.AllowableValues"),
            multipart_push: string_at(service, "/MultipartHttpPushUri"),
            apply_times,
        }
    }

    /// How an image at `uri` reaches this BMC: `SimpleUpdate` when the BMC can fetch
    /// the URL's scheme itself, else the multipart push.
    ///
    /// # Errors
    /// Why neither is possible.
    pub fn method_for(&self, uri: &str) -> Result<Method, String> {
        let scheme = uri.split("://").next().unwrap_or_default().to_ascii_uppercase();
        let fetches = self.protocols.is_empty() || self.protocols.iter().any(|p| p.eq_ignore_ascii_case(&scheme));
        match (&self.simple_update, &self.multipart_push) {
            (Some(_), _) if fetches => Ok(Method::SimpleUpdate),
            (_, Some(_)) => Ok(Method::MultipartPush),
            (Some(_), None) => Err(format!(
                "the BMC's SimpleUpdate fetches {} only, not `{scheme}`, and it has no MultipartHttpPushUri",
                self.protocols.join(", ")
            )),
            (None, None) => Err("the BMC's UpdateService offers neither SimpleUpdate nor MultipartHttpPushUri".into()),
        }
    }

    /// `OnReset` when supported: the update then runs from the rollout's reset.
    #[must_use]
    pub fn apply_time(&self) -> Option<&'static str> {
        self.apply_times.iter().any(|time| time == "OnReset").then_some("OnReset")
    }
}

/// How the image was handed to the BMC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `UpdateService.SimpleUpdate` with `ImageURI`: the BMC fetches the image.
    SimpleUpdate,
    /// A `multipart/form-data` POST of the image to `MultipartHttpPushUri`.
    MultipartPush,
}

/// What one update did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// How the image was sent.
    pub method: Method,
    /// The task monitor or task followed, when the BMC started one.
    pub task: Option<String>,
    /// The apply time asked for (`OnReset`), if any.
    pub apply_time: Option<&'static str>,
}

/// Why an update did not happen or did not finish.
#[derive(Debug, Error)]
pub enum UpdateError {
    /// The image could not be fetched to check it: nothing was sent to the BMC.
    #[error("BMC `{host}`: cannot fetch firmware image `{uri}` to check it: {reason}")]
    Image {
        /// The host.
        host: String,
        /// The image URL.
        uri: String,
        /// Why.
        reason: String,
    },
    /// The image is not the one declared: nothing was sent to the BMC.
    #[error(
        "BMC `{host}`: firmware image `{uri}` has SHA-256 {actual}, the hardware profile says {expected}; nothing was sent to the BMC"
    )]
    Checksum {
        /// The host.
        host: String,
        /// The image URL.
        uri: String,
        /// Declared.
        expected: String,
        /// Found.
        actual: String,
    },
    /// The component is not one this BMC reports.
    #[error(
        "BMC `{host}`: no firmware component `{component}` (known: `BIOS`, `BMC`, or a FirmwareInventory Id: {known})"
    )]
    UnknownComponent {
        /// The host.
        host: String,
        /// The component.
        component: String,
        /// The inventory's ids.
        known: String,
    },
    /// The service offers no way to take this image.
    #[error("BMC `{host}`: cannot update firmware: {reason}")]
    NoMethod {
        /// The host.
        host: String,
        /// Why.
        reason: String,
    },
    /// The BMC refused or failed.
    #[error(transparent)]
    Bmc(#[from] BmcError),
}

/// Where a task is, from one answer of its monitor or task resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskProgress {
    /// Still running (`202`, or a `TaskState` that is not final).
    Running,
    /// Finished well (`Completed` with `TaskStatus` OK or Warning, or the operation's
    /// own success answer).
    Done,
    /// Finished badly: the final state and the task's first message.
    Failed {
        /// `TaskState` (or `Completed` with a `Critical` status).
        state: String,
        /// The first of the task's `Messages`.
        message: Option<String>,
    },
}

/// Judges one answer of a task monitor (`202` while running, then the operation's
/// answer) or of a `Task` resource (`TaskState`, `TaskStatus`). Pure.
#[must_use]
pub fn task_progress(status: u16, body: &[u8]) -> TaskProgress {
    if status == 202 {
        return TaskProgress::Running;
    }
    let Some(task) = serde_json::from_slice::<Value>(body).ok().filter(|task| task.get("TaskState").is_some()) else {
        // The monitor answered with the operation's own response.
        return TaskProgress::Done;
    };
    let state = string_at(&task, "/TaskState").unwrap_or_default();
    let message = task
        .pointer("/Messages")
        .and_then(Value::as_array)
        .and_then(|messages| messages.iter().find_map(|m| string_at(m, "/Message")));
    match state.as_str() {
        "Completed" if string_at(&task, "/TaskStatus").as_deref() == Some("Critical") => {
            TaskProgress::Failed { state: "Completed (Critical)".to_owned(), message }
        }
        "Completed" => TaskProgress::Done,
        "Exception" | "Killed" | "Cancelled" | "Interrupted" => TaskProgress::Failed { state, message },
        _ => TaskProgress::Running,
    }
}

/// Polls `poll` every `interval` until the task is done, failed, or `timeout` passed.
///
/// # Errors
/// The poll's own error, a failed task as [`BmcError::TaskFailed`], or
/// [`BmcError::Timeout`].
pub async fn follow_task<F, Fut>(
    host: &str,
    task: &str,
    mut poll: F,
    interval: Duration,
    timeout: Duration,
) -> Result<(), BmcError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<TaskProgress, BmcError>>,
{
    let started = Instant::now();
    loop {
        match poll().await? {
            TaskProgress::Done => return Ok(()),
            TaskProgress::Failed { state, message } => {
                return Err(BmcError::TaskFailed { host: host.to_owned(), task: task.to_owned(), state, message });
            }
            TaskProgress::Running => {}
        }
        if started.elapsed() >= timeout {
            return Err(BmcError::Timeout {
                host: host.to_owned(),
                what: format!("firmware update task `{task}`"),
                waited: started.elapsed(),
            });
        }
        tokio::time::sleep(interval).await;
    }
}

/// SHA-256 of `bytes`, lower-case hex.
#[must_use]
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The `multipart/form-data` body of a push: `UpdateParameters` (JSON) and
/// `UpdateFile` (the image), as DSP0266's multipart HTTP push defines them.
#[must_use]
pub fn multipart_body(boundary: &str, parameters: &Value, file_name: &str, image: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(image.len() + 512);
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"UpdateParameters\"\r\nContent-Type: application/json\r\n\r\n{parameters}\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"UpdateFile\"; filename=\"{}\"\r\nContent-Type: application/octet-stream\r\n\r\n",
            file_name.replace(['"', '\r', '\n'], "_")
        )
        .as_bytes(),
    );
    body.extend_from_slice(image);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

impl Redfish {
    /// The service's update capabilities.
    ///
    /// # Errors
    /// [`BmcError::Unsupported`] without an `UpdateService`, or see [`BmcError`].
    pub async fn update_service(&self) -> Result<UpdateService, BmcError> {
        let path = link(&self.service_root, "/UpdateService").ok_or_else(|| BmcError::Unsupported {
            host: self.config.host.clone(),
            what: "the service root has no UpdateService".to_owned(),
        })?;
        Ok(UpdateService::from_document(&self.get(&path).await?))
    }

    /// The resource an update of `component` targets: the system for `BIOS`, its
    /// manager for `BMC`, else the `FirmwareInventory` member with that `Id`.
    ///
    /// # Errors
    /// [`UpdateError::UnknownComponent`], or see [`BmcError`].
    pub async fn update_target(&self, system: &str, component: &str) -> Result<String, UpdateError> {
        if component == "BIOS" {
            return Ok(system.to_owned());
        }
        if component == "BMC"
            && let Some(manager) = link(&self.get(system).await?, "/Links/ManagedBy/0")
        {
            return Ok(manager);
        }
        let mut known = Vec::new();
        if let Some(service) = link(&self.service_root, "/UpdateService")
            && let Some(inventory) = link(&self.get(&service).await?, "/FirmwareInventory")
        {
            // Services advertise an inventory they do not always serve.
            let items = match self.get(&inventory).await {
                Ok(collection) => members(&collection),
                Err(BmcError::NotFound { .. }) => Vec::new(),
                Err(error) => return Err(error.into()),
            };
            for item in items {
                let id = string_at(&self.get(&item).await?, "/Id").unwrap_or_default();
                if id == component {
                    return Ok(item);
                }
                known.push(id);
            }
        }
        Err(UpdateError::UnknownComponent {
            host: self.config.host.clone(),
            component: component.to_owned(),
            known: if known.is_empty() { "none reported".to_owned() } else { known.join(", ") },
        })
    }

    /// Fetches the image and checks its SHA-256, before anything reaches the BMC.
    ///
    /// # Errors
    /// [`UpdateError::Image`] or [`UpdateError::Checksum`].
    pub async fn verified_image(&self, image: &FirmwareImage<'_>) -> Result<Vec<u8>, UpdateError> {
        let failed =
            |reason: String| UpdateError::Image { host: self.config.host.clone(), uri: image.uri.to_owned(), reason };
        // The image server is not the BMC: the system's trust roots, not the BMC's CA.
        let http = super::http_client(&self.config.host, None, false, self.config.task_timeout)?;
        let response = http.get(image.uri).send().await.map_err(|error| failed(error.to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status().as_u16())));
        }
        let bytes = response.bytes().await.map_err(|error| failed(error.to_string()))?;
        let actual = sha256_hex(&bytes);
        if !actual.eq_ignore_ascii_case(image.sha256) {
            return Err(UpdateError::Checksum {
                host: self.config.host.clone(),
                uri: image.uri.to_owned(),
                expected: image.sha256.to_owned(),
                actual,
            });
        }
        Ok(bytes.to_vec())
    }

    /// Updates `component` of `system` from `image`: checks the image, hands it to
    /// the BMC as the service allows, and follows the task to its end.
    ///
    /// # Errors
    /// See [`UpdateError`].
    pub async fn update_firmware(
        &self,
        system: &str,
        component: &str,
        image: &FirmwareImage<'_>,
    ) -> Result<Update, UpdateError> {
        let service = self.update_service().await?;
        let method = service
            .method_for(image.uri)
            .map_err(|reason| UpdateError::NoMethod { host: self.config.host.clone(), reason })?;
        let target = self.update_target(system, component).await?;
        let bytes = self.verified_image(image).await?;
        let apply_time = service.apply_time();
        let mut parameters = json!({ "Targets": [target] });
        if let Some(time) = apply_time {
            parameters["@Redfish.OperationApplyTime"] = json!(time);
        }
        tracing::info!(host = %self.config.host, component, ?method, image = image.uri, "firmware update");
        let reply = match method {
            Method::SimpleUpdate => {
                let mut body = parameters;
                body["ImageURI"] = json!(image.uri);
                let path = service.simple_update.as_deref().unwrap_or_default();
                let url = self.url(path)?;
                self.send(reqwest::Method::POST, &url, Some(&body), true).await?
            }
            Method::MultipartPush => {
                let path = service.multipart_push.as_deref().unwrap_or_default();
                let name = image.uri.rsplit('/').next().unwrap_or("image.bin");
                self.push(path, &parameters, name, &bytes).await?
            }
        };
        let task = self.task_of(&reply)?;
        if let Some(task) = task.as_deref() {
            let host = self.config.host.clone();
            follow_task(
                &host,
                task,
                || async move {
                    let answer = self.send(reqwest::Method::GET, task, None, true).await?;
                    Ok(task_progress(answer.status.as_u16(), &answer.body))
                },
                self.config.poll_interval,
                self.config.task_timeout,
            )
            .await?;
        }
        Ok(Update { method, task, apply_time })
    }

    /// The task to follow after an update request: the `Location` of a `202` (a task
    /// monitor) or of a `200`/`204` that names one, else a Task in the body.
    fn task_of(&self, reply: &Reply) -> Result<Option<String>, BmcError> {
        if let Some(location) = reply.header("Location") {
            return self.url(&location).map(Some);
        }
        let body: Option<Value> = serde_json::from_slice(&reply.body).ok();
        match body.as_ref().filter(|task| task.get("TaskState").is_some()).and_then(|task| link(task, "")) {
            Some(task) => self.url(&task).map(Some),
            None if reply.status == StatusCode::ACCEPTED => Err(BmcError::Decode {
                host: self.config.host.clone(),
                url: String::new(),
                reason: "update accepted without a task to follow (no `Location`, no Task)".to_owned(),
            }),
            None => Ok(None),
        }
    }

    /// One multipart POST of an image (not retried: an update must not start twice).
    async fn push(&self, path: &str, parameters: &Value, file_name: &str, image: &[u8]) -> Result<Reply, BmcError> {
        let url = self.url(path)?;
        let boundary = format!("toolkit-{}", &sha256_hex(image)[..24]);
        let body = multipart_body(&boundary, parameters, file_name, image);
        let request = self
            .http
            .post(&url)
            .header("Accept", "application/json")
            .header("Content-Type", format!("multipart/form-data; boundary={boundary}"))
            .body(body);
        let response = self
            .auth
            .apply(request, &self.config.credentials)
            .send()
            .await
            .map_err(|error| self.transport_error(&reqwest::Method::POST, &url, 1, error))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|error| self.transport_error(&reqwest::Method::POST, &url, 1, error))?
            .to_vec();
        self.classify(&reqwest::Method::POST, &url, Reply { status, headers, body })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    #[test]
    fn reads_what_the_service_offers_and_chooses_how_to_send() {
        // sushy-tools' UpdateService document (templates/update_service.json).
        let sushy = json!({
            "Actions": { "#UpdateService.SimpleUpdate": {
                "TransferProtocol@Redfish.AllowableValues": ["HTTP", "HTTPS"],
                "target": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate" } },
            "FirmwareInventory": { "@odata.id": "/redfish/v1/UpdateService/FirmwareInventory" },
            "HttpPushUri": "/redfish/v1/UpdateService/FirmwareInventory",
        });
        let service = UpdateService::from_document(&sushy);
        assert_eq!(service.method_for("http://127.0.0.1/bios.bin"), Ok(Method::SimpleUpdate));
        assert!(service.method_for("ftp://server/bios.bin").is_err_and(|why| why.contains("HTTP, HTTPS only")));
        assert_eq!(service.apply_time(), None);
        // A service that takes pushes and applies on reset.
        let pushing = json!({
            "MultipartHttpPushUri": "/redfish/v1/UpdateService/upload",
            "HttpPushUriOptions": { "HttpPushUriApplyTime": {
                "ApplyTime@Redfish.AllowableValues": ["Immediate", "OnReset"] } },
        });
        let service = UpdateService::from_document(&pushing);
        assert_eq!(service.method_for("https://fw/bmc.bin"), Ok(Method::MultipartPush));
        assert_eq!(service.apply_time(), Some("OnReset"));
        assert!(UpdateService::default().method_for("http://x/y").is_err_and(|why| why.contains("neither")));
    }

    #[test]
    fn judges_task_answers() {
        assert_eq!(task_progress(202, b""), TaskProgress::Running);
        // sushy-tools' task (templates/task.json).
        let done = br#"{"Id":"42","TaskState":"Completed","TaskStatus":"OK","PercentComplete":100}"#;
        assert_eq!(task_progress(200, done), TaskProgress::Done);
        assert_eq!(task_progress(200, br#"{"TaskState":"Running","PercentComplete":40}"#), TaskProgress::Running);
        assert_eq!(task_progress(204, b""), TaskProgress::Done);
        let failed = br#"{"TaskState":"Exception","Messages":[{"Message":"Image signature check failed"}]}"#;
        assert_eq!(
            task_progress(200, failed),
            TaskProgress::Failed { state: "Exception".into(), message: Some("Image signature check failed".into()) }
        );
        let critical = br#"{"TaskState":"Completed","TaskStatus":"Critical"}"#;
        assert!(matches!(task_progress(200, critical), TaskProgress::Failed { .. }));
    }

    #[tokio::test]
    async fn follows_a_task_until_it_ends() {
        let answers = RefCell::new(vec![TaskProgress::Done, TaskProgress::Running, TaskProgress::Running]);
        let polls = RefCell::new(0);
        let poll = || {
            *polls.borrow_mut() += 1;
            let next = answers.borrow_mut().pop().unwrap_or(TaskProgress::Done);
            async move { Ok(next) }
        };
        follow_task("n1", "/t/1", poll, Duration::ZERO, Duration::from_mins(1)).await.expect("done");
        assert_eq!(*polls.borrow(), 3);

        let failing =
            || async { Ok(TaskProgress::Failed { state: "Killed".into(), message: Some("flash write error".into()) }) };
        let error =
            follow_task("n1", "/t/2", failing, Duration::ZERO, Duration::from_mins(1)).await.expect_err("fails");
        assert_eq!(error.to_string(), "BMC `n1`: task `/t/2` ended `Killed`: flash write error");

        let running = || async { Ok(TaskProgress::Running) };
        let error = follow_task("n1", "/t/3", running, Duration::ZERO, Duration::ZERO).await.expect_err("times out");
        assert!(error.to_string().contains("firmware update task `/t/3` not done"), "{error}");
    }

    /// A recorded document of `tests/support/mockups/` (see its SOURCE.md).
    fn mockup(path: &str) -> Value {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/mockups").join(path);
        serde_json::from_str(&std::fs::read_to_string(&file).expect("mockup")).expect("JSON")
    }

    #[test]
    fn reads_recorded_update_services() {
        // A real iDRAC 9 (Dell R650): SimpleUpdate fetches HTTP(S), NFS, CIFS, TFTP;
        // OnReset supported; a multipart push for anything else.
        let dell = UpdateService::from_document(&mockup("dell-r650/UpdateService/index.json"));
        assert_eq!(dell.method_for("https://fw.example/iDRAC.d9"), Ok(Method::SimpleUpdate));
        assert_eq!(dell.method_for("ftp://fw.example/iDRAC.d9"), Ok(Method::MultipartPush));
        assert_eq!(dell.apply_time(), Some("OnReset"));
        // DMTF's rack-mount mockup: SimpleUpdate without a protocol list, apply times
        // only in the push options, no multipart push.
        let dmtf = UpdateService::from_document(&mockup("dmtf-rackmount1/UpdateService/index.json"));
        assert_eq!(dmtf.method_for("http://fw/bios.bin"), Ok(Method::SimpleUpdate));
        assert_eq!(dmtf.multipart_push, None);
        assert_eq!(dmtf.apply_time(), Some("OnReset"));
    }

    const PUSH_SERVICE: &str = r#"{"MultipartHttpPushUri":"/redfish/v1/UpdateService/upload",
      "HttpPushUriOptions":{"HttpPushUriApplyTime":{"ApplyTime@Redfish.AllowableValues":["Immediate","OnReset"]}}}"#;

    /// A BMC that takes pushes only: connect (root, credentials check), the service,
    /// the system (for its manager), then what `rest` scripts.
    fn push_bmc(rest: Vec<super::super::tests::Answer>) -> Vec<super::super::tests::Answer> {
        let root = r#"{"Systems":{"@odata.id":"/redfish/v1/Systems"},"UpdateService":{"@odata.id":"/redfish/v1/UpdateService"}}"#;
        let mut answers = vec![
            (200, vec![], root.to_owned()),
            (200, vec![], r#"{"Members":[{"@odata.id":"/redfish/v1/Systems/1"}]}"#.to_owned()),
            (200, vec![], PUSH_SERVICE.to_owned()),
            (200, vec![], r#"{"Links":{"ManagedBy":[{"@odata.id":"/redfish/v1/Managers/1"}]}}"#.to_owned()),
        ];
        answers.extend(rest);
        answers
    }

    #[tokio::test]
    async fn pushes_a_checked_image_and_follows_the_task_monitor() {
        let image = "BMC IMAGE 7.10";
        let (base, seen, server) = super::super::tests::serve(push_bmc(vec![
            (200, vec![], image.to_owned()),
            (202, vec![("Location", "/taskmon/5".to_owned())], String::new()),
            (202, vec![], String::new()),
            (200, vec![], r#"{"TaskState":"Completed","TaskStatus":"OK"}"#.to_owned()),
        ]));
        let client = Redfish::connect(super::super::tests::config(&base)).await.expect("connects");
        let uri = format!("{base}/fw/bmc-7.10.bin");
        let sha256 = sha256_hex(image.as_bytes());
        let update = client
            .update_firmware("/redfish/v1/Systems/1", "BMC", &FirmwareImage { uri: &uri, sha256: &sha256 })
            .await
            .expect("updates");
        server.join().expect("server");
        assert_eq!(
            update,
            Update {
                method: Method::MultipartPush,
                task: Some(format!("{base}/taskmon/5")),
                apply_time: Some("OnReset")
            }
        );
        let seen = seen.lock().expect("lock").clone();
        assert_eq!((seen[4].method.as_str(), seen[4].path.as_str()), ("GET", "/fw/bmc-7.10.bin"));
        let push = &seen[5];
        assert_eq!((push.method.as_str(), push.path.as_str()), ("POST", "/redfish/v1/UpdateService/upload"));
        assert!(push.header("Content-Type").is_some_and(|t| t.starts_with("multipart/form-data; boundary=")));
        assert!(
            push.body.contains(r#"{"@Redfish.OperationApplyTime":"OnReset","Targets":["/redfish/v1/Managers/1"]}"#),
            "{}",
            push.body
        );
        assert!(push.body.contains("filename=\"bmc-7.10.bin\"") && push.body.contains(image), "{}", push.body);
        assert_eq!(seen.len(), 8, "two polls of the task monitor");
    }

    #[tokio::test]
    async fn an_image_that_is_not_the_declared_one_never_reaches_the_bmc() {
        let (base, seen, server) =
            super::super::tests::serve(push_bmc(vec![(200, vec![], "SOMETHING ELSE".to_owned())]));
        let client = Redfish::connect(super::super::tests::config(&base)).await.expect("connects");
        let uri = format!("{base}/fw/bmc-7.10.bin");
        let sha256 = sha256_hex(b"BMC IMAGE 7.10");
        let error = client
            .update_firmware("/redfish/v1/Systems/1", "BMC", &FirmwareImage { uri: &uri, sha256: &sha256 })
            .await
            .expect_err("checksum mismatch");
        server.join().expect("server");
        assert!(matches!(error, UpdateError::Checksum { .. }), "{error}");
        assert!(seen.lock().expect("lock").iter().all(|request| request.method == "GET"), "nothing was pushed");
    }

    #[test]
    fn a_push_body_carries_parameters_then_the_image() {
        let body = multipart_body("b0", &json!({"Targets": []}), "bmc\".bin", b"\x00IMAGE");
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with("--b0\r\nContent-Disposition: form-data; name=\"UpdateParameters\""), "{text}");
        assert!(text.contains("{\"Targets\":[]}\r\n--b0\r\n"), "{text}");
        assert!(text.contains("name=\"UpdateFile\"; filename=\"bmc_.bin\""), "{text}");
        assert!(text.ends_with("\x00IMAGE\r\n--b0--\r\n"), "{text}");
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
