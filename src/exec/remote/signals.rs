//! The exec-server's termination signals: SIGTERM, SIGHUP and SIGINT are noted by a
//! handler (an atomic store, nothing else) and acted on by the server's signal thread,
//! which ends the running commands before the process exits. A handler rather than a
//! blocked mask, because commands would inherit a mask, while exec resets a handler.
//! Installed only by `serve_stdio`, the server program's `main`; never by the library's
//! client side.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

const SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGHUP, libc::SIGINT];

/// The last termination signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    RECEIVED.store(signal, Ordering::SeqCst);
}

/// Installs the handler for SIGTERM, SIGHUP and SIGINT.
pub(crate) fn install() -> io::Result<()> {
    for signal in SIGNALS {
        // SAFETY: `action` is zeroed then filled; `note` only stores to an atomic,
        // which is async-signal-safe; sigaction reads valid pointers.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = note as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Waits for a termination signal, looking every 20 ms, until `finished`.
pub(crate) fn wait(finished: &AtomicBool) -> Option<i32> {
    while !finished.load(Ordering::SeqCst) {
        let signal = RECEIVED.load(Ordering::SeqCst);
        if signal != 0 {
            return Some(signal);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}
