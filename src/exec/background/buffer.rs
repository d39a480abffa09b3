//! The bounded buffer of one output stream of a background process: the first bytes are
//! kept (the head: a server's start-up lines), then the newest ones in a ring (the tail);
//! what falls between them is dropped and counted. Reads go by the byte offset in the
//! whole stream, so a reader picks up where it left off and learns how much it missed.
//! Pure data: no I/O, no locking (its owner locks).

use crate::exec::OutputSlice;

/// One stream's buffer: at most `head_cap + tail_cap` bytes, whatever the stream's length.
#[derive(Debug)]
pub(super) struct StreamBuffer {
    head: Vec<u8>,
    head_cap: usize,
    /// A ring once full: the oldest byte is at `tail_start`.
    tail: Vec<u8>,
    tail_cap: usize,
    tail_start: usize,
    /// Bytes the stream has had (offset of the next byte).
    total: u64,
}

impl StreamBuffer {
    /// A buffer keeping at most `cap` bytes: a quarter of it as the head, the rest as the
    /// newest bytes.
    pub(super) fn new(cap: usize) -> StreamBuffer {
        let head_cap = cap / 4;
        StreamBuffer {
            head: Vec::new(),
            head_cap,
            tail: Vec::new(),
            tail_cap: cap - head_cap,
            tail_start: 0,
            total: 0,
        }
    }

    /// Bytes the stream has had so far.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// Bytes dropped from the middle so far.
    pub(super) fn dropped(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// Appends `data` to the stream.
    pub(super) fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let to_head = (self.head_cap - self.head.len()).min(data.len());
        self.head.extend_from_slice(&data[..to_head]);
        data = &data[to_head..];
        if data.is_empty() || self.tail_cap == 0 {
            return;
        }
        if self.tail.len() < self.tail_cap {
            let fill = (self.tail_cap - self.tail.len()).min(data.len());
            self.tail.extend_from_slice(&data[..fill]);
            data = &data[fill..];
        }
        if data.len() >= self.tail_cap {
            let cap = self.tail_cap;
            self.tail.copy_from_slice(&data[data.len() - cap..]);
            self.tail_start = 0;
            return;
        }
        while !data.is_empty() {
            let n = (self.tail_cap - self.tail_start).min(data.len());
            self.tail[self.tail_start..self.tail_start + n].copy_from_slice(&data[..n]);
            self.tail_start = (self.tail_start + n) % self.tail_cap;
            data = &data[n..];
        }
    }

    /// The offset of the oldest byte of the tail (`head.len()` while nothing was dropped).
    fn tail_offset(&self) -> u64 {
        self.total - self.tail.len() as u64
    }

    /// The bytes from offset `from` on, at most `max` of them (the oldest first), with the
    /// dropped bytes between `from` and the end of the read counted.
    pub(super) fn read(&self, from: u64, max: usize) -> OutputSlice {
        let from = from.min(self.total);
        let mut bytes = Vec::new();
        let mut at = from;
        let head_len = self.head.len() as u64;
        if at < head_len {
            let end = head_len.min(at.saturating_add(max as u64));
            bytes.extend_from_slice(&self.head[at as usize..end as usize]);
            at = end;
        }
        let mut dropped = 0;
        let dropped_at = bytes.len();
        let tail_offset = self.tail_offset();
        if at < tail_offset && bytes.len() < max {
            dropped = tail_offset - at;
            at = tail_offset;
        }
        if at >= tail_offset && at < self.total && bytes.len() < max {
            let skip = (at - tail_offset) as usize;
            let want = (max - bytes.len()).min(self.tail.len() - skip);
            // In stream order the ring is its oldest bytes (from `tail_start` on), then the
            // newest (before it); before it wraps, `tail_start` is 0.
            let (newest, oldest) = self.tail.split_at(self.tail_start);
            let (mut skip, mut want) = (skip, want);
            for part in [oldest, newest] {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                let take = (part.len() - skip).min(want);
                bytes.extend_from_slice(&part[skip..skip + take]);
                want -= take;
                skip = 0;
            }
            at += (bytes.len() - dropped_at) as u64;
        }
        OutputSlice {
            bytes,
            dropped,
            dropped_at,
            end: at,
            total: self.total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn a_short_stream_reads_back_whole_from_any_offset() {
        let data = stream(300);
        let mut buffer = StreamBuffer::new(1000);
        for chunk in data.chunks(7) {
            buffer.push(chunk);
        }
        for from in [0, 1, 249, 250, 299, 300, 1000] {
            let slice = buffer.read(from, usize::MAX);
            assert_eq!(slice.bytes, data[(from as usize).min(300)..], "from {from}");
            assert_eq!((slice.dropped, slice.end, slice.total), (0, 300, 300));
        }
    }

    #[test]
    fn a_flood_keeps_head_and_newest_bytes_and_counts_the_dropped_middle() {
        let data = stream(100_003);
        // Chunk sizes that wrap the ring at odd places, and one chunk bigger than it.
        for chunks in [7usize, 333, 5000, 100_003] {
            let mut buffer = StreamBuffer::new(4000);
            for chunk in data.chunks(chunks) {
                buffer.push(chunk);
            }
            let whole = buffer.read(0, usize::MAX);
            assert_eq!(whole.bytes.len(), 4000);
            assert_eq!(&whole.bytes[..1000], &data[..1000], "head, chunks {chunks}");
            assert_eq!(&whole.bytes[1000..], &data[data.len() - 3000..], "tail");
            assert_eq!((whole.dropped, whole.dropped_at), (100_003 - 4000, 1000));
            assert_eq!((whole.end, whole.total), (100_003, 100_003));
        }
    }

    #[test]
    fn reads_resume_at_their_end_and_never_repeat_or_skip_a_kept_byte() {
        let data = stream(9_000);
        let mut buffer = StreamBuffer::new(2000);
        let mut read_back = Vec::new();
        let mut dropped = 0;
        let mut from = 0;
        // Interleave writes and small reads, as a process writing while a model reads.
        for chunk in data.chunks(450) {
            buffer.push(chunk);
            let slice = buffer.read(from, 300);
            assert_eq!(slice.end, from + slice.dropped + slice.bytes.len() as u64);
            read_back.extend_from_slice(&slice.bytes);
            dropped += slice.dropped;
            from = slice.end;
        }
        while from < buffer.total() {
            let slice = buffer.read(from, 300);
            read_back.extend_from_slice(&slice.bytes);
            dropped += slice.dropped;
            from = slice.end;
        }
        assert_eq!(read_back.len() as u64 + dropped, 9_000);
        // What was read is the stream with holes: each kept byte at its place.
        let mut position = 0;
        let mut remaining = read_back.as_slice();
        while !remaining.is_empty() {
            let run = data[position..]
                .iter()
                .zip(remaining)
                .take_while(|(a, b)| a == b)
                .count();
            assert!(run > 0, "byte at {position} does not match");
            remaining = &remaining[run..];
            position += run;
            if !remaining.is_empty() {
                position = data[position..]
                    .windows(remaining.len().min(8))
                    .position(|w| w == &remaining[..w.len()])
                    .map(|p| position + p)
                    .expect("the rest follows later in the stream");
            }
        }
    }

    #[test]
    fn a_read_from_inside_the_dropped_middle_says_how_much_it_missed() {
        let data = stream(10_000);
        let mut buffer = StreamBuffer::new(1000);
        buffer.push(&data);
        let slice = buffer.read(5_000, usize::MAX);
        assert_eq!((slice.dropped, slice.dropped_at), (4_250, 0));
        assert_eq!(slice.bytes, &data[9_250..]);
        let limited = buffer.read(100, 100);
        assert_eq!(limited.bytes, &data[100..200]);
        assert_eq!((limited.dropped, limited.end), (0, 200));
    }
}
