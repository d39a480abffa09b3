//! The crate's one mutex helper: [`lock`] takes a lock whether or not a thread panicked
//! while holding it. It never blocks on anything but the mutex it is given.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, recovering the guard if a thread panicked while holding it: a panicking tool,
/// callback or test thread must not make the session, the cancel token or a scripted model
/// unusable afterwards (every value guarded in this crate stays consistent between
/// statements).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
