//! Byte searches that ask the CPU what it supports only when the answer pays.
//!
//! The `memchr` crate's top-level functions choose AVX2 or SSE2 on their first call through
//! std's runtime feature detection, which executes `cpuid` several times. Under
//! virtualisation every `cpuid` traps to the hypervisor: 5.2 µs each on our CI machine (a
//! Firecracker VM), about 50 µs for the detection, paid by the first search of every
//! process — on the agent's way from the first response to the first tool call. These
//! functions scan inputs shorter than [`SIMD_FROM`] (SSE lines, command output chunks, most
//! files) with memchr's portable word-at-a-time code, which needs no detection, and hand
//! longer ones to the vectorised code, beside which the one-time detection is small.

use memchr::arch::all::memchr::{One, Two};

/// Inputs of at least this many bytes are scanned with the vectorised code.
const SIMD_FROM: usize = 64 * 1024;

/// The index of the first `needle` in `haystack`.
pub(crate) fn find(needle: u8, haystack: &[u8]) -> Option<usize> {
    if haystack.len() >= SIMD_FROM {
        memchr::memchr(needle, haystack)
    } else {
        One::new(needle).find(haystack)
    }
}

/// The index of the last `needle` in `haystack`.
pub(crate) fn rfind(needle: u8, haystack: &[u8]) -> Option<usize> {
    if haystack.len() >= SIMD_FROM {
        memchr::memrchr(needle, haystack)
    } else {
        One::new(needle).rfind(haystack)
    }
}

/// The index of the first `a` or `b` in `haystack`, a piece of a stream after `streamed`
/// bytes of it: a stream that has reached [`SIMD_FROM`] bytes is scanned with the
/// vectorised code, so that a long stream does not pay the portable code's lower speed
/// (the SSE parser's 64 MiB bench: 1.37 GB/s portable, 1.72 GB/s vectorised), while a short
/// one (a tool call's response) never triggers the detection.
pub(crate) fn find_either_in(a: u8, b: u8, haystack: &[u8], streamed: usize) -> Option<usize> {
    if streamed.saturating_add(haystack.len()) >= SIMD_FROM {
        memchr::memchr2(a, b, haystack)
    } else {
        Two::new(a, b).find(haystack)
    }
}

/// How many times `needle` occurs in `haystack`.
pub(crate) fn count(needle: u8, haystack: &[u8]) -> usize {
    if haystack.len() >= SIMD_FROM {
        memchr::memchr_iter(needle, haystack).count()
    } else {
        One::new(needle).count(haystack)
    }
}

/// The index just past the `n`th (1-based) `needle` in `haystack`, or `Err` with how many
/// there are when fewer.
pub(crate) fn after_nth(needle: u8, haystack: &[u8], n: usize) -> Result<usize, usize> {
    let mut seen = 0;
    let mut at = 0;
    while seen < n {
        match find(needle, &haystack[at..]) {
            Some(i) => {
                seen += 1;
                at += i + 1;
            }
            None => return Err(seen),
        }
    }
    Ok(at)
}

/// The index of the `n`th (1-based) `needle` counted from the end of `haystack`, if there
/// are that many.
pub(crate) fn nth_last(needle: u8, haystack: &[u8], n: usize) -> Option<usize> {
    let mut end = haystack.len();
    for _ in 0..n {
        end = rfind(needle, &haystack[..end])?;
    }
    (n > 0).then_some(end)
}

/// The index of the first occurrence of `needle` in `haystack` (`Some(0)` for an empty
/// needle).
pub(crate) fn find_slice(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if haystack.len() >= SIMD_FROM {
        memchr::memmem::find(haystack, needle)
    } else {
        memchr::arch::all::twoway::Finder::new(needle).find(haystack, needle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every function agrees with a naive scan on both sides of the threshold, with the
    /// match at the start, in the middle, at the end and absent.
    #[test]
    fn short_and_long_inputs_give_the_naive_answers() {
        for len in [0, 1, 7, 64, SIMD_FROM - 1, SIMD_FROM, SIMD_FROM + 13] {
            for at in [None, Some(0), Some(len / 2), Some(len.saturating_sub(1))] {
                let mut hay = vec![b'a'; len];
                if let Some(at) = at.filter(|&at| at < len) {
                    hay[at] = b'\n';
                }
                let naive = hay.iter().position(|&b| b == b'\n');
                assert_eq!(find(b'\n', &hay), naive, "find, len {len}, at {at:?}");
                assert_eq!(
                    rfind(b'\n', &hay),
                    hay.iter().rposition(|&b| b == b'\n'),
                    "rfind, len {len}"
                );
                assert_eq!(find_either_in(b'\r', b'\n', &hay, 0), naive, "find_either");
                assert_eq!(
                    find_either_in(b'\r', b'\n', &hay, SIMD_FROM),
                    naive,
                    "find_either, a long stream"
                );
                assert_eq!(count(b'\n', &hay), usize::from(naive.is_some()), "count");
                assert_eq!(
                    find_slice(&hay, b"a\n"),
                    hay.windows(2).position(|w| w == b"a\n"),
                    "find_slice, len {len}, at {at:?}"
                );
            }
        }
    }

    #[test]
    fn nth_matches_from_either_end() {
        let text = b"one\ntwo\nthree\n";
        assert_eq!(after_nth(b'\n', text, 1), Ok(4));
        assert_eq!(after_nth(b'\n', text, 3), Ok(text.len()));
        assert_eq!(after_nth(b'\n', text, 4), Err(3));
        assert_eq!(after_nth(b'\n', b"", 1), Err(0));
        assert_eq!(nth_last(b'\n', text, 1), Some(13));
        assert_eq!(nth_last(b'\n', text, 3), Some(3));
        assert_eq!(nth_last(b'\n', text, 4), None);
        assert_eq!(find_slice(b"abc", b""), Some(0));
    }
}
