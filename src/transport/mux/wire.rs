//! What a run and the background process say to each other: one request per
//! socket connection, each message a 4-byte big-endian length and JSON; an `Exec`
//! request is followed by the command's standard input up to the end of the
//! stream, an `Output` reply by the stdout and stderr bytes it announces.

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use crate::transport::ExitStatus;
use crate::transport::ssh::{CommandLine, SshOptions, SshTarget};

/// The largest message accepted: targets and command lines, never file contents.
const LIMIT: u32 = 16 << 20;

/// From a run to the background process.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub(super) enum Request {
    /// Hold a trusted connection to `target`.
    Connect {
        /// Where and how to log in.
        target: SshTarget,
        /// The run's limits and host key policy.
        options: SshOptions,
        /// Idle seconds before the process exits.
        idle: u64,
    },
    /// Run a command; its input follows.
    Exec {
        /// Where and how to log in.
        target: SshTarget,
        /// The run's limits and host key policy.
        options: SshOptions,
        /// Idle seconds before the process exits.
        idle: u64,
        /// What to run.
        command: CommandLine,
    },
    /// Drop the connection to `target` (it reboots).
    Forget {
        /// The host.
        target: SshTarget,
    },
    /// Close every connection and exit.
    Stop,
}

/// From the background process to a run.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub(super) enum Reply {
    /// The connection is open and trusted.
    Connected,
    /// The command ended; `stdout` then `stderr` bytes follow.
    Output {
        /// How it ended.
        status: ExitStatus,
        /// Bytes of stdout that follow.
        stdout: u64,
        /// Bytes of stderr that follow.
        stderr: u64,
    },
    /// What failed, as the error says it.
    Failed {
        /// The message.
        message: String,
    },
    /// Done as asked.
    Done,
    /// Exiting.
    Stopping,
}

pub(super) async fn send<W, T>(writer: &mut W, message: &T) -> std::io::Result<()>
where
    W: AsyncWrite + Unpin,
    T: serde::Serialize,
{
    let bytes = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    let length = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    writer.write_all(&length.to_be_bytes()).await?;
    writer.write_all(&bytes).await?;
    writer.flush().await
}

pub(super) async fn receive<R, T>(reader: &mut R) -> std::io::Result<T>
where
    R: AsyncRead + Unpin,
    T: serde::de::DeserializeOwned,
{
    let length = reader.read_u32().await?;
    if length > LIMIT {
        return Err(std::io::Error::other(format!("a message of {length} bytes is over the limit")));
    }
    let mut bytes = vec![0; length as usize];
    reader.read_exact(&mut bytes).await?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}
