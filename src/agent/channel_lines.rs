//! A channel a client talks on, read a line at a time with a bound
//! (`#multinode:show-group`'s and `show-start`'s lines of JSON).

use std::collections::VecDeque;

use russh::ChannelReadHalf;

/// The whole lines of a channel, in order. At most `max` bytes of a line
/// are held: a longer line is dropped whole.
pub(super) struct Lines<'a> {
    rx: &'a mut ChannelReadHalf,
    max: usize,
    pending: Vec<u8>,
    skipping: bool,
    ready: VecDeque<Vec<u8>>,
}

impl<'a> Lines<'a> {
    pub(super) fn new(rx: &'a mut ChannelReadHalf, max: usize) -> Self {
        Lines {
            rx,
            max,
            pending: Vec::new(),
            skipping: false,
            ready: VecDeque::new(),
        }
    }

    /// The next whole line (with its newline); `None` at the channel's end.
    pub(super) async fn next(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(line) = self.ready.pop_front() {
                return Some(line);
            }
            let russh::ChannelMsg::Data { data } = self.rx.wait().await? else {
                continue;
            };
            for part in data.split_inclusive(|&b| b == b'\n') {
                let whole = part.ends_with(b"\n");
                if !self.skipping {
                    self.pending.extend_from_slice(part);
                }
                if self.pending.len() > self.max {
                    self.pending = Vec::new();
                    self.skipping = !whole;
                    continue;
                }
                if whole {
                    if !self.skipping {
                        self.ready.push_back(std::mem::take(&mut self.pending));
                    }
                    self.pending.clear();
                    self.skipping = false;
                }
            }
        }
    }
}
