//! Progress of long work, as the library reports it: the binary draws bars (indicatif), tests and
//! other callers pass [`NoProgress`].

/// Starts a progress bar for a piece of work.
pub trait Progress: Sync {
    /// A bar over `total` steps (0: unknown yet), labelled `what`.
    fn bar(&self, what: &str, total: u64) -> Box<dyn Bar>;
}

/// One piece of work's progress. Shared with worker threads (the pool writer), hence `Sync`.
pub trait Bar: Send + Sync {
    fn inc(&self, steps: u64);
    fn set_position(&self, position: u64);
    fn set_length(&self, total: u64);
    fn set_message(&self, message: String);
    /// The work is over: the bar goes away.
    fn finish(&self);
}

/// Reports nothing.
pub struct NoProgress;

struct NoBar;

impl Progress for NoProgress {
    fn bar(&self, _: &str, _: u64) -> Box<dyn Bar> {
        Box::new(NoBar)
    }
}

impl Bar for NoBar {
    fn inc(&self, _: u64) {}
    fn set_position(&self, _: u64) {}
    fn set_length(&self, _: u64) {}
    fn set_message(&self, _: String) {}
    fn finish(&self) {}
}
