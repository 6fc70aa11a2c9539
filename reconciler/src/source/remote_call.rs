//! A call to a Git remote (a fetch, a status push) on its own thread, so a remote that hangs
//! holds up neither the passes nor the Lease: the loop waits a little for the answer, goes on
//! when it does not come, collects it later, and gives the call up after a deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long the loop waits for a remote's answer before going on without it: a healthy remote
/// answers well within this, so the iteration that asked sees the answer.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// How often the loop looks again while a call is out.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Why a call (`"fetch"`, `"push"`) the remote did not answer within `after` failed, and the
/// flag that waits longer.
pub fn no_answer(call: &str, after: Duration) -> String {
    format!(
        "the remote did not answer within {}; the {call} was given up (--git-timeout sets how long to wait)",
        nodewright_schema::duration::format_go_duration(Duration::from_secs(after.as_secs()))
    )
}

/// A call out to a remote.
pub struct RemoteCall<T> {
    started: Instant,
    answer: Receiver<T>,
    give_up: Arc<AtomicBool>,
}

/// What a look at a call found.
pub enum Answer<T> {
    /// The remote answered.
    Ready(T),
    /// Still out, for less than the deadline.
    Waiting(RemoteCall<T>),
    /// No answer within the deadline (the remote's `--git-timeout`): the call was told to give
    /// up, and its thread ends with its transport's own timeout.
    TimedOut(Duration),
    /// The call's thread ended without an answer (it panicked).
    Vanished,
}

impl<T: Send + 'static> RemoteCall<T> {
    /// Starts `call` on its own thread; it may check the flag it is given and stop early once
    /// the call is given up.
    pub fn start(call: impl FnOnce(&AtomicBool) -> T + Send + 'static) -> Self {
        let (send, answer) = mpsc::sync_channel(1);
        let give_up = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&give_up);
        std::thread::spawn(move || {
            // The loop may have gone by the time the answer comes: nobody to tell then.
            let _ = send.send(call(&flag));
        });
        RemoteCall {
            started: Instant::now(),
            answer,
            give_up,
        }
    }
}

impl<T> RemoteCall<T> {
    /// Waits up to `patience` for the answer, and at most until `deadline` after the start.
    pub fn look(self, patience: Duration, deadline: Duration) -> Answer<T> {
        let left = deadline.saturating_sub(self.started.elapsed());
        match self.answer.recv_timeout(patience.min(left)) {
            Ok(answer) => Answer::Ready(answer),
            Err(RecvTimeoutError::Timeout) if self.started.elapsed() < deadline => {
                Answer::Waiting(self)
            }
            Err(RecvTimeoutError::Timeout) => {
                self.give_up.store(true, Ordering::Relaxed);
                Answer::TimedOut(self.started.elapsed())
            }
            Err(RecvTimeoutError::Disconnected) => Answer::Vanished,
        }
    }
}

impl<T> RemoteCall<T> {
    /// Tells the call to give up and waits up to `grace` for it to end (its answer, if any):
    /// what it holds for the remote (a credentials file, a git process) goes with it.
    pub fn give_up(self, grace: Duration) -> Option<T> {
        self.give_up.store(true, Ordering::Relaxed);
        self.answer.recv_timeout(grace).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(600);

    #[test]
    fn a_quick_answer_is_seen_by_the_look_that_waits_for_it() {
        let call = RemoteCall::start(|_| 7);
        assert!(matches!(
            call.look(Duration::from_secs(5), LONG),
            Answer::Ready(7)
        ));
    }

    #[test]
    fn a_slow_answer_is_collected_later_and_a_silent_remote_is_given_up_at_the_deadline() {
        let (release, held) = mpsc::channel::<()>();
        let call = RemoteCall::start(move |give_up: &AtomicBool| {
            let _ = held.recv();
            give_up.load(Ordering::Relaxed)
        });
        let Answer::Waiting(call) = call.look(Duration::from_millis(20), LONG) else {
            panic!("an answer before the remote gave one");
        };
        release.send(()).unwrap();
        assert!(matches!(
            call.look(Duration::from_secs(5), LONG),
            Answer::Ready(false)
        ));

        let (_never, silent) = mpsc::channel::<()>();
        let call = RemoteCall::start(move |_: &AtomicBool| {
            let _ = silent.recv_timeout(Duration::from_secs(60));
        });
        let deadline = Duration::from_millis(50);
        let Answer::Waiting(call) = call.look(Duration::from_millis(10), deadline) else {
            panic!("an answer from a silent remote");
        };
        let waited = Instant::now();
        match call.look(Duration::from_secs(30), deadline) {
            Answer::TimedOut(after) => assert!(after >= deadline, "{after:?}"),
            _ => panic!("a silent remote is given up"),
        }
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "the look ends at the deadline, not after its patience"
        );
    }
}
