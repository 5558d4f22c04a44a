//! Job lifecycle states.

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobStatus {
    Running,
    /// Cancellation was requested; the work has not stopped yet.
    Stopping,
    Completed,
    Killed,
    Failed,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Stopping => "stopping",
            JobStatus::Completed => "completed",
            JobStatus::Killed => "killed",
            JobStatus::Failed => "failed",
        }
    }

    pub fn is_terminal(self) -> bool {
        match self {
            JobStatus::Running | JobStatus::Stopping => false,
            JobStatus::Completed | JobStatus::Killed | JobStatus::Failed => true,
        }
    }
}

/// How a job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminal {
    /// The work ran to its end (a command's non-zero exit is still `completed`).
    Completed,
    /// The work was stopped (a kill, a signal, or a process that never started).
    Killed,
    /// The job could not be carried out or tracked.
    Failed,
}

impl From<Terminal> for JobStatus {
    fn from(t: Terminal) -> Self {
        match t {
            Terminal::Completed => JobStatus::Completed,
            Terminal::Killed => JobStatus::Killed,
            Terminal::Failed => JobStatus::Failed,
        }
    }
}
