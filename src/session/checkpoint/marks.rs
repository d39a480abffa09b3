//! Where each input (and, with round checkpoints, each tool round) starts in the history:
//! the points a rewind or a fork can go back to. Pure bookkeeping; the transcript keeps
//! the same marks as `checkpoint` records, so that a resumed session has them too.

use std::path::PathBuf;

/// Where the history stood at a mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HistoryAt {
    /// The first `len` turns of the history as it was after `epoch` compactions.
    Current { epoch: usize, len: usize },
    /// Only the transcript has it: the history at its `checkpoint` record `seq`.
    Recorded { seq: u64 },
}

/// One point to go back to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    /// Its number among the transcript's `checkpoint` records (and the session's marks).
    pub(crate) seq: u64,
    pub(crate) input: usize,
    pub(crate) round: usize,
    /// The file checkpoint taken there, if any (and still kept).
    pub(crate) checkpoint: Option<u64>,
    /// The store that checkpoint is in.
    pub(crate) store: Option<PathBuf>,
    pub(crate) at: HistoryAt,
}

/// A session's marks, oldest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Marks {
    entries: Vec<Mark>,
    next_seq: u64,
}

impl Marks {
    /// Marks read back from a transcript; the next one gets `next_seq`.
    pub(crate) fn from_entries(entries: Vec<Mark>, next_seq: u64) -> Marks {
        Marks { entries, next_seq }
    }

    /// The number of the next input: one after the last marked.
    pub(crate) fn next_input(&self) -> usize {
        self.entries.iter().map(|m| m.input).max().unwrap_or(0) + 1
    }

    /// The number of the input being processed (the last marked).
    pub(crate) fn current_input(&self) -> usize {
        self.entries.iter().map(|m| m.input).max().unwrap_or(0)
    }

    /// Adds a mark and returns it.
    pub(crate) fn push(
        &mut self,
        input: usize,
        round: usize,
        checkpoint: Option<u64>,
        store: Option<PathBuf>,
        at: HistoryAt,
    ) -> &Mark {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.entries.push(Mark {
            seq,
            input,
            round,
            checkpoint,
            store,
            at,
        });
        self.entries.last().expect("just pushed")
    }

    /// The mark of `input` (round `round`), if the conversation has it.
    pub(crate) fn find(&self, input: usize, round: usize) -> Option<&Mark> {
        self.entries
            .iter()
            .rev()
            .find(|m| m.input == input && m.round == round)
    }

    /// The inputs and rounds that can be gone back to, for error messages.
    pub(crate) fn describe(&self) -> String {
        let inputs: Vec<String> = self
            .entries
            .iter()
            .filter(|m| m.round == 0)
            .map(|m| m.input.to_string())
            .collect();
        if inputs.is_empty() {
            "the session has no input to go back to yet".to_string()
        } else {
            format!("the inputs to go back to are {}", inputs.join(", "))
        }
    }

    /// Drops the marks at and after (`input`, `round`): the history no longer has them.
    pub(crate) fn truncate(&mut self, input: usize, round: usize) {
        self.entries.retain(|m| (m.input, m.round) < (input, round));
    }

    /// Forgets the file checkpoints from `id` on (a rewind of the files undid them).
    pub(crate) fn forget_checkpoints_from(&mut self, id: u64) {
        for mark in &mut self.entries {
            if mark.checkpoint.is_some_and(|c| c >= id) {
                mark.checkpoint = None;
            }
        }
    }

    /// The marks, oldest first.
    pub(crate) fn entries(&self) -> &[Mark] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_count_on_from_the_last_mark_and_a_history_rewind_takes_their_numbers_back() {
        let mut marks = Marks::default();
        for input in 1..=3 {
            let at = HistoryAt::Current {
                epoch: 0,
                len: input * 2,
            };
            marks.push(input, 0, Some(input as u64), None, at);
        }
        marks.push(3, 1, Some(4), None, HistoryAt::Current { epoch: 0, len: 7 });
        assert_eq!(marks.next_input(), 4);
        assert_eq!(marks.find(3, 1).unwrap().seq, 3);
        marks.truncate(2, 0);
        assert_eq!(marks.next_input(), 2, "input 2 is input 2 again");
        assert!(marks.find(2, 0).is_none());
        marks.push(2, 0, Some(5), None, HistoryAt::Current { epoch: 0, len: 2 });
        assert_eq!(
            marks.find(2, 0).unwrap().seq,
            4,
            "sequence numbers never repeat"
        );
        marks.forget_checkpoints_from(5);
        assert_eq!(marks.find(2, 0).unwrap().checkpoint, None);
        assert_eq!(marks.find(1, 0).unwrap().checkpoint, Some(1));
    }
}
