//! The history log of spec/scenarios.md §5: one line per observable action, as it happens.

use jiff::Timestamp;

/// One history entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// When it happened (virtual time).
    pub at: Timestamp,
    /// The line, e.g. `cordon n1`, `job tuning/tuning/apply/n1`.
    pub line: String,
}

/// Every entry in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    entries: Vec<Entry>,
}

impl History {
    /// Appends an entry.
    pub fn record(&mut self, at: Timestamp, line: impl Into<String>) {
        self.entries.push(Entry {
            at,
            line: line.into(),
        });
    }
    /// All entries, oldest first, leaving none.
    pub fn take(&mut self) -> Vec<Entry> {
        std::mem::take(&mut self.entries)
    }
    /// All entries, oldest first.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }
    /// Index of the first occurrence of a line.
    pub fn first(&self, line: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.line == line)
    }
    /// How many times a line occurs.
    pub fn count(&self, line: &str) -> usize {
        self.entries.iter().filter(|e| e.line == line).count()
    }
}
