//! The training command: started in a process group of its own, so a stop reaches everything it started
//! (data-loader workers, `torchrun` ranks), the way a pod's termination does; stdin, stdout and stderr are
//! inherited untouched.

use std::ffi::OsString;
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A started command.
pub struct Supervised {
    child: tokio::process::Child,
    /// The process group id (the child's pid, as it leads its own group).
    group: Pid,
}

/// Why a command could not be started, with the exit code a shell would use.
#[derive(Debug)]
pub struct SpawnError {
    /// What went wrong, for the user (e.g. `cannot run train.py: No such file or directory`).
    pub message: String,
    /// 127: not found; 126: found but not executable.
    pub exit_code: u8,
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status code.
    Code(i32),
    /// It was killed by this signal number.
    Signal(i32),
}

impl Exit {
    fn from_status(status: ExitStatus) -> Exit {
        match (status.code(), status.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            // Neither is impossible on Unix for a reaped child; report it as a failure.
            (None, None) => Exit::Code(1),
        }
    }

    /// The shell's convention: the code, or 128 + the signal number.
    pub fn shell_code(self) -> u8 {
        match self {
            Exit::Code(c) => u8::try_from(c).unwrap_or(1),
            Exit::Signal(s) => u8::try_from(128 + s).unwrap_or(255),
        }
    }

    /// Whether it exited with code 0.
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit status {c}"),
            Exit::Signal(s) => match Signal::try_from(*s) {
                Ok(sig) => write!(f, "killed by {}", sig.as_str()),
                Err(_) => write!(f, "killed by signal {s}"),
            },
        }
    }
}

impl Supervised {
    /// Starts `command` (program and arguments) with `env` added to trainwarden's own environment.
    pub fn spawn(command: &[OsString], env: &[(String, OsString)]) -> Result<Supervised, SpawnError> {
        let Some((program, args)) = command.split_first() else {
            return Err(SpawnError { message: "no command given".into(), exit_code: 2 });
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).envs(env.iter().map(|(k, v)| (k, v))).process_group(0).kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| SpawnError {
            message: format!("cannot run {}: {e}", program.to_string_lossy()),
            exit_code: if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 },
        })?;
        let pid = child.id().ok_or_else(|| SpawnError {
            message: format!("{} exited before it could be supervised", program.to_string_lossy()),
            exit_code: 1,
        })?;
        let group =
            Pid::from_raw(i32::try_from(pid).map_err(|_| SpawnError {
                message: format!("process id {pid} out of range"),
                exit_code: 1,
            })?);
        Ok(Supervised { child, group })
    }

    /// The command's process group, for signalling while [`Supervised::wait`] is pending.
    pub fn group(&self) -> ProcessGroup {
        ProcessGroup(self.group)
    }

    /// Waits for the command (the group leader) to exit.
    pub async fn wait(&mut self) -> Result<Exit, String> {
        self.child.wait().await.map(Exit::from_status).map_err(|e| format!("waiting for the command: {e}"))
    }
}

/// A handle on the command's process group.
#[derive(Clone, Copy, Debug)]
pub struct ProcessGroup(Pid);

impl ProcessGroup {
    /// The process group id (the command's pid).
    pub fn id(self) -> i32 {
        self.0.as_raw()
    }

    /// Sends `signal` to the whole group. A group that is already gone is not an error.
    pub fn signal(self, signal: Signal) -> Result<(), String> {
        match killpg(self.0, signal) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(format!("sending {} to process group {}: {e}", signal.as_str(), self.0)),
        }
    }
}
