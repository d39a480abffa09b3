//! The sockets this test process holds, seen from the inside: for the connections to a
//! loopback port, whether `TCP_NODELAY` is set on the client's end.
//!
//! A server cannot see its peer's socket options, so the check looks at the client's own
//! descriptors (`/proc/self/fd`): the library runs in the test process, so its sockets
//! are ours to inspect. Each descriptor is duplicated before it is looked at, so one that
//! the library closes (and the kernel reuses) meanwhile is never misread.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// For every TCP socket of this process whose peer is `127.0.0.1:port`, whether it has
/// `TCP_NODELAY` set.
pub fn nodelay_of_connections_to(port: u16) -> Vec<bool> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: F_DUPFD_CLOEXEC on a number gives a new descriptor or fails; nothing is
        // read through a pointer.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            continue;
        }
        // SAFETY: `dup` is a new descriptor owned here.
        let dup = unsafe { OwnedFd::from_raw_fd(dup) };
        if peer_port(&dup) == Some(port) {
            found.push(nodelay(&dup));
        }
    }
    found
}

/// The peer's port when `fd` is an IPv4 TCP socket connected to 127.0.0.1.
fn peer_port(fd: &OwnedFd) -> Option<u16> {
    // SAFETY: zeroed sockaddr_in is a valid value; the kernel writes at most `len` bytes.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `addr` and `len` outlive the call and `len` is its size.
    let r = unsafe {
        libc::getpeername(
            fd.as_raw_fd(),
            (&mut addr as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    };
    let loopback = u32::from_be(addr.sin_addr.s_addr) == 0x7f00_0001;
    (r == 0 && i32::from(addr.sin_family) == libc::AF_INET && loopback)
        .then(|| u16::from_be(addr.sin_port))
}

/// Whether `TCP_NODELAY` is set on `fd`.
fn nodelay(fd: &OwnedFd) -> bool {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` outlive the call and `len` is its size.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    r == 0 && value != 0
}
