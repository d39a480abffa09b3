//! Random bytes from the kernel (`getrandom(2)`), for secrets the library makes itself:
//! the OAuth PKCE verifier and `state` of the MCP client.
//!
//! It never falls back to a weaker source: when the kernel cannot give random bytes the
//! caller gets the error.

use std::io;

/// Fills `buf` with random bytes from the kernel's pool (`getrandom(2)`, blocking only
/// until the pool is first initialised at boot).
pub(crate) fn fill(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: `rest` is a valid, writable buffer of `rest.len()` bytes for the whole
        // call, and `getrandom` writes at most that many bytes into it.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        filled += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_fills_differ_and_fill_the_whole_buffer() {
        let mut a = [0u8; 64];
        let mut b = [0u8; 64];
        super::fill(&mut a).unwrap();
        super::fill(&mut b).unwrap();
        assert_ne!(a, b);
        assert!(a.iter().any(|&x| x != 0));
    }
}
