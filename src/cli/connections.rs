//! `toolkit disconnect` and the hidden `toolkit ssh-mux`: the background process
//! that keeps SSH connections between runs, and the way to end it early.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::cli::Status;
use crate::cli::live;
use crate::transport::mux;

/// Arguments of `toolkit disconnect`.
#[derive(Debug, clap::Args)]
pub struct DisconnectArgs {}

/// Arguments of `toolkit ssh-mux`.
#[derive(Debug, clap::Args)]
pub struct MuxArgs {
    /// The unix socket to serve.
    #[arg(long)]
    socket: PathBuf,
    /// Seconds without a request before exiting.
    #[arg(long)]
    idle: u64,
}

pub(crate) fn disconnect(_args: &DisconnectArgs) -> anyhow::Result<Status> {
    // Every build's keeper: connections kept by an older toolkit close too.
    let sockets = mux::all_sockets().context("locating the connection keepers' sockets")?;
    let runtime = live::runtime()?;
    let mut stopped = false;
    for socket in sockets {
        stopped |= runtime
            .block_on(mux::stop(&socket))
            .with_context(|| format!("asking the connection keeper at `{}` to stop", socket.display()))?;
    }
    eprintln!("{}", if stopped { "closed the kept SSH connections" } else { "no SSH connections were kept" });
    Ok(Status::Clean)
}

pub(crate) fn serve(args: &MuxArgs) -> anyhow::Result<Status> {
    live::runtime()?
        .block_on(mux::serve(&args.socket, std::time::Duration::from_secs(args.idle)))
        .with_context(|| format!("serving `{}`", args.socket.display()))?;
    Ok(Status::Clean)
}
