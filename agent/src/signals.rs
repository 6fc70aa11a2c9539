//! SIGTERM handling (§14): the running step finishes, no further step starts.

use std::sync::atomic::{AtomicBool, Ordering};

static TERMINATED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigterm(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    TERMINATED.store(true, Ordering::SeqCst);
}

/// Installs the SIGTERM handler. Children get the default disposition back at `exec`.
pub fn install() {
    let handler: extern "C" fn(libc::c_int) = on_sigterm;
    // SAFETY: `sigaction` with a handler that only stores an atomic; the struct is zeroed and
    // then filled, as libc requires. SA_RESTART keeps blocking reads of step output going.
    #[allow(unsafe_code)]
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// Whether SIGTERM has been received.
pub fn terminated() -> bool {
    TERMINATED.load(Ordering::SeqCst)
}
