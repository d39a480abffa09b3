//! Cancellation shared by streams, commands and sessions.
//!
//! A [`CancelToken`] is a cloneable flag with callbacks. Cancelling it sets the flag, wakes
//! every thread blocked in [`CancelToken::wait_timeout`], and runs the registered callbacks
//! once (an HTTP stream registers `ureq::Agent::shutdown`, a command registers the kill of
//! its process group). Tokens form a tree: a [`child`](CancelToken::child) is cancelled with
//! its parent but can be cancelled alone, which is how a session's `interrupt()` cancels one
//! input while `abort()` cancels everything.
//!
//! This module never spawns threads and never blocks except in `wait_timeout`.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sync::lock;

type Callback = Box<dyn FnOnce() + Send + 'static>;

struct Inner {
    cancelled: AtomicBool,
    next_id: AtomicU64,
    state: Mutex<Vec<(u64, Callback)>>,
    wake: Condvar,
    /// For a child: its registration on the parent, dropped (unregistered) with the child.
    parent_link: Mutex<Option<CancelGuard>>,
}

/// A cloneable cancellation flag with wake-ups and callbacks.
///
/// ```
/// use agentloop::CancelToken;
/// use std::time::Duration;
///
/// let token = CancelToken::new();
/// let child = token.child();
/// let waiter = {
///     let child = child.clone();
///     std::thread::spawn(move || child.wait_timeout(Duration::from_secs(30)))
/// };
/// token.cancel();
/// assert!(waiter.join().unwrap(), "woken by the cancel, not by the timeout");
/// assert!(child.is_cancelled());
/// ```
#[derive(Clone)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

impl Default for CancelToken {
    fn default() -> Self {
        CancelToken::new()
    }
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Removes its callback from the token when dropped (see [`CancelToken::on_cancel`]).
#[must_use = "dropping the guard unregisters the callback at once"]
pub struct CancelGuard {
    token: CancelToken,
    id: u64,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        let mut callbacks = lock(&self.token.inner.state);
        callbacks.retain(|(id, _)| *id != self.id);
    }
}

impl fmt::Debug for CancelGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelGuard").field("id", &self.id).finish()
    }
}

impl CancelToken {
    /// A new token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken {
            inner: Arc::new(Inner {
                cancelled: AtomicBool::new(false),
                next_id: AtomicU64::new(1),
                state: Mutex::new(Vec::new()),
                wake: Condvar::new(),
                parent_link: Mutex::new(None),
            }),
        }
    }

    /// Cancels the token: sets the flag, wakes waiters and runs every registered callback
    /// once, on the calling thread. Cancelling twice does nothing the second time.
    pub fn cancel(&self) {
        let callbacks = {
            let mut state = lock(&self.inner.state);
            if self.inner.cancelled.swap(true, Ordering::SeqCst) {
                return;
            }
            std::mem::take(&mut *state)
        };
        self.inner.wake.notify_all();
        for (_, callback) in callbacks {
            callback();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called on this token or an ancestor.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Runs `callback` when the token is cancelled, or at once if it already is.
    ///
    /// The callback stays registered while the returned guard lives.
    pub fn on_cancel(&self, callback: impl FnOnce() + Send + 'static) -> CancelGuard {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let run_now = {
            let mut state = lock(&self.inner.state);
            if self.is_cancelled() {
                true
            } else {
                state.push((id, Box::new(callback)));
                return CancelGuard {
                    token: self.clone(),
                    id,
                };
            }
        };
        debug_assert!(run_now);
        callback();
        CancelGuard {
            token: self.clone(),
            id,
        }
    }

    /// A token that is cancelled when this one is, and that can also be cancelled alone.
    pub fn child(&self) -> CancelToken {
        let child = CancelToken::new();
        let weak = Arc::downgrade(&child.inner);
        let guard = self.on_cancel(move || {
            if let Some(inner) = weak.upgrade() {
                CancelToken { inner }.cancel();
            }
        });
        // The child owns its registration on the parent: dropping the last clone of the
        // child unregisters it, so a long-lived parent does not collect dead entries. The
        // registration holds only a weak reference to the child (no cycle).
        *lock(&child.inner.parent_link) = Some(guard);
        child
    }

    /// Blocks for up to `timeout`; returns `true` as soon as the token is cancelled, `false`
    /// if the time ran out first. Used for retry backoff and kill grace periods.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = lock(&self.inner.state);
        loop {
            if self.is_cancelled() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            let (next, _) = self
                .inner
                .wake
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner());
            state = next;
        }
    }
}

thread_local! {
    /// The token of the tool call this thread runs on the round's own thread, for code
    /// below it that takes no token (see [`with_current`]).
    static CURRENT: std::cell::RefCell<Option<CancelToken>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `token` as this thread's current token: long loops deep in code whose
/// signature takes no token (the local environment's file reads, run without a helper
/// thread on local files) stop early once it is cancelled ([`current_cancelled`]).
pub(crate) fn with_current<T>(token: &CancelToken, f: impl FnOnce() -> T) -> T {
    let previous = CURRENT.with(|current| current.replace(Some(token.clone())));
    /// Puts the previous token back, also when `f` unwinds.
    struct Restore(Option<CancelToken>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|current| *current.borrow_mut() = previous);
        }
    }
    let _restore = Restore(previous);
    f()
}

/// Whether this thread's current token ([`with_current`]) is cancelled; `false` without one.
pub(crate) fn current_cancelled() -> bool {
    CURRENT.with(|current| {
        current
            .borrow()
            .as_ref()
            .is_some_and(CancelToken::is_cancelled)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn callbacks_run_once_and_guards_unregister() {
        let token = CancelToken::new();
        let count = Arc::new(AtomicUsize::new(0));
        let c1 = count.clone();
        let _kept = token.on_cancel(move || {
            c1.fetch_add(1, Ordering::SeqCst);
        });
        let c2 = count.clone();
        drop(token.on_cancel(move || {
            c2.fetch_add(10, Ordering::SeqCst);
        }));
        token.cancel();
        token.cancel();
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn on_cancel_after_cancel_runs_at_once() {
        let token = CancelToken::new();
        token.cancel();
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let _g = token.on_cancel(move || r.store(true, Ordering::SeqCst));
        assert!(ran.load(Ordering::SeqCst));
    }

    #[test]
    fn child_cancel_does_not_cancel_parent() {
        let parent = CancelToken::new();
        let child = parent.child();
        child.cancel();
        assert!(!parent.is_cancelled());
        let second = parent.child();
        parent.cancel();
        assert!(second.is_cancelled());
    }

    #[test]
    fn dropped_children_unregister_from_their_parent() {
        let parent = CancelToken::new();
        for _ in 0..100 {
            let child = parent.child();
            drop(child);
        }
        assert!(lock(&parent.inner.state).is_empty());
        let kept = parent.child();
        assert_eq!(lock(&parent.inner.state).len(), 1);
        parent.cancel();
        assert!(kept.is_cancelled());
    }

    #[test]
    fn wait_timeout_times_out_when_not_cancelled() {
        let token = CancelToken::new();
        let start = Instant::now();
        assert!(!token.wait_timeout(Duration::from_millis(30)));
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn the_current_token_is_seen_inside_with_current_and_restored_after() {
        assert!(!current_cancelled(), "no token outside");
        let outer = CancelToken::new();
        let inner = CancelToken::new();
        inner.cancel();
        with_current(&outer, || {
            assert!(!current_cancelled());
            with_current(&inner, || assert!(current_cancelled()));
            assert!(!current_cancelled(), "the outer token is back");
            outer.cancel();
            assert!(current_cancelled());
        });
        assert!(!current_cancelled(), "none after");
        let unwound = std::panic::catch_unwind(|| with_current(&inner, || panic!("inside")));
        assert!(unwound.is_err());
        assert!(!current_cancelled(), "none after an unwind");
    }
}
