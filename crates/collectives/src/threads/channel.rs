//! The message channel from one thread rank to another: single producer, single consumer,
//! first in first out.
//!
//! Small messages travel in a ring of cache-aligned slots. The sender writes the tag, the
//! length, the stamp and up to [`INLINE_BYTES`] bytes of payload into the next slot with
//! relaxed atomic stores and publishes the slot by storing its sequence number (release);
//! the receiver polls that one word (acquire). No lock, no allocation and, per message, the
//! one cache-line transfer that two cores exchanging a flag cannot avoid. The receiver
//! publishes how far it has read only for the sender to check for room, which the sender
//! does only when its cached copy says the ring is full.
//!
//! Longer payloads go through a locked queue of (recycled) buffers, each announced by its
//! slot, so they keep their place in the ring's order. When the ring is full (the receiver
//! is far behind) whole messages queue in a locked overflow queue, and the sender keeps
//! using it until the receiver has drained it: sends never block and messages between a
//! pair never overtake one another.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::lock;
use crate::comm::Tag;

/// Slots per ring: how many messages a sender may have in the ring unreceived before it
/// spills into the overflow queue.
const RING: u64 = 32;
/// Payload words a slot carries inline.
const INLINE_WORDS: usize = 12;
/// Payload bytes a slot carries inline; longer payloads go through the buffer queue.
pub(crate) const INLINE_BYTES: usize = INLINE_WORDS * 8;

/// `meta` bits: the low 32 hold the inline length.
const LEN_MASK: u64 = (1 << 32) - 1;
/// `meta` bit: the payload is the front of the buffer queue, not inline.
const BULK: u64 = 1 << 32;
/// `meta` bit: `stamp` holds the sender's stamp.
const STAMPED: u64 = 1 << 33;

/// One message slot: two cache lines, written by the sender only.
#[repr(align(128))]
struct Slot {
    /// `ticket + 1` once the slot holds message number `ticket` of this channel.
    seq: AtomicU64,
    tag: AtomicU64,
    meta: AtomicU64,
    stamp: AtomicU64,
    words: [AtomicU64; INLINE_WORDS],
}

impl Slot {
    fn empty() -> Self {
        Self {
            seq: AtomicU64::new(0),
            tag: AtomicU64::new(0),
            meta: AtomicU64::new(0),
            stamp: AtomicU64::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// A value alone on its cache lines (no false sharing with its neighbours).
#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

/// A message's bytes, inline (no allocation) or in a buffer.
#[derive(Debug)]
pub(crate) enum Payload {
    /// Up to [`INLINE_BYTES`] bytes in native-endian words.
    Inline {
        len: usize,
        words: [u64; INLINE_WORDS],
    },
    /// A buffer from the sender's pool (returned to it after delivery).
    Heap(Vec<u8>),
}

impl Payload {
    /// The message's bytes (inline words are viewed in place, native-endian as written).
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Payload::Inline { len, words } => &bytemuck::cast_slice::<u64, u8>(words)[..*len],
            Payload::Heap(v) => v,
        }
    }
}

/// A received message.
#[derive(Debug)]
pub(crate) struct Message {
    pub(crate) tag: Tag,
    pub(crate) payload: Payload,
    /// What a modeling backend attaches (the `sim` backend: the sender's modeled post time).
    pub(crate) stamp: Option<f64>,
}

/// The sender's position in a channel; only the sending rank touches it.
#[derive(Default)]
struct SendSide {
    /// Tickets sent through the ring.
    tail: AtomicU64,
    /// The receiver's progress as last read: the ring has room while `tail - head_seen < RING`.
    head_seen: AtomicU64,
}

/// The channel from one rank to another.
pub(crate) struct Channel {
    /// The message slots (the whole channel is created only when its pair first talks, see
    /// `threads/table.rs`, so the ring is allocated with it).
    ring: Box<[Slot]>,
    /// The sender's position (its own cache lines: relaxed loads and stores of plain words).
    tx: Padded<SendSide>,
    /// The receiver's next ticket to read: written by the receiver only, read by the sender
    /// only when its cached copy says the ring is full.
    head: Padded<AtomicU64>,
    /// Payloads longer than a slot, in ring order.
    bulk: Mutex<VecDeque<Vec<u8>>>,
    /// Whole messages sent while the ring was full or this queue was not empty.
    overflow: Mutex<VecDeque<Message>>,
    /// Length of `overflow` (changed under its lock; read without it).
    overflow_len: Padded<AtomicUsize>,
}

impl Channel {
    /// An empty channel with its ring.
    pub(crate) fn new() -> Self {
        Self {
            ring: (0..RING).map(|_| Slot::empty()).collect(),
            tx: Padded::default(),
            head: Padded::default(),
            bulk: Mutex::default(),
            overflow: Mutex::default(),
            overflow_len: Padded::default(),
        }
    }

    /// Send a message; `spare` supplies a buffer when the payload does not fit a slot.
    /// Called by the sending rank only.
    pub(crate) fn send(
        &self,
        tag: Tag,
        data: &[u8],
        stamp: Option<f64>,
        spare: impl FnOnce() -> Vec<u8>,
    ) {
        let tx = &self.tx.0;
        if self.overflow_len.0.load(Ordering::Acquire) == 0 {
            let tail = tx.tail.load(Ordering::Relaxed);
            let mut head_seen = tx.head_seen.load(Ordering::Relaxed);
            if tail - head_seen >= RING {
                head_seen = self.head.0.load(Ordering::Acquire);
                tx.head_seen.store(head_seen, Ordering::Relaxed);
            }
            if tail - head_seen < RING {
                let slot = &self.ring[(tail % RING) as usize];
                let mut meta = 0;
                if data.len() <= INLINE_BYTES {
                    // Whole words, then the tail (a copy of variable length per word
                    // called memmove for every word).
                    let whole = data.chunks_exact(8);
                    let tail = whole.remainder();
                    for (chunk, w) in whole.zip(&slot.words) {
                        let word = u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]));
                        w.store(word, Ordering::Relaxed);
                    }
                    if !tail.is_empty() {
                        let mut word = [0u8; 8];
                        word[..tail.len()].copy_from_slice(tail);
                        slot.words[data.len() / 8]
                            .store(u64::from_ne_bytes(word), Ordering::Relaxed);
                    }
                    meta |= data.len() as u64;
                } else {
                    let mut buf = spare();
                    buf.clear();
                    buf.extend_from_slice(data);
                    lock(&self.bulk).push_back(buf);
                    meta |= BULK;
                }
                if let Some(t) = stamp {
                    slot.stamp.store(t.to_bits(), Ordering::Relaxed);
                    meta |= STAMPED;
                }
                slot.tag.store(tag, Ordering::Relaxed);
                slot.meta.store(meta, Ordering::Relaxed);
                slot.seq.store(tail + 1, Ordering::Release);
                tx.tail.store(tail + 1, Ordering::Relaxed);
                return;
            }
        }
        let mut buf = spare();
        buf.clear();
        buf.extend_from_slice(data);
        let mut queue = lock(&self.overflow);
        queue.push_back(Message {
            tag,
            payload: Payload::Heap(buf),
            stamp,
        });
        self.overflow_len.0.fetch_add(1, Ordering::Release);
    }

    /// Whether a message is ready for [`Channel::try_recv`] (the receiver checks it right
    /// before parking).
    pub(crate) fn ready(&self) -> bool {
        self.published().is_some() || self.overflow_len.0.load(Ordering::Acquire) > 0
    }

    /// The next message in order, if one has arrived. Called by the receiving rank only.
    pub(crate) fn try_recv(&self) -> Option<Message> {
        if let Some(m) = self.take_slot() {
            return Some(m);
        }
        if self.overflow_len.0.load(Ordering::Acquire) == 0 {
            return None;
        }
        // Every ring message sent before the first overflowed one is visible now (the
        // acquire above synchronises with the sender's increment, made after them), and
        // the sender writes no ring slot again until the overflow queue is drained.
        if let Some(m) = self.take_slot() {
            return Some(m);
        }
        let mut queue = lock(&self.overflow);
        let m = queue.pop_front()?;
        self.overflow_len.0.fetch_sub(1, Ordering::Release);
        Some(m)
    }

    /// The receive fast path: when the next message in the ring has `tag` and its payload
    /// inline, consume it and hand its bytes and stamp to `deliver` (from a copy on the
    /// stack: no [`Message`] is built), returning what `deliver` returns. `None` when the
    /// ring's next slot is not published yet, holds another tag or a bulk payload: then
    /// [`Channel::try_recv`] takes the next message, in order, as before. Called by the
    /// receiving rank only.
    pub(crate) fn take_inline<R>(
        &self,
        tag: Tag,
        deliver: impl FnOnce(&[u8], Option<f64>) -> R,
    ) -> Option<R> {
        let (slot, next) = self.published()?;
        if slot.tag.load(Ordering::Relaxed) != tag {
            return None;
        }
        let meta = slot.meta.load(Ordering::Relaxed);
        if meta & BULK != 0 {
            return None;
        }
        let stamp = slot.stamp(meta);
        let mut words = [0u64; INLINE_WORDS];
        let len = slot.read_inline(meta, &mut words);
        self.release(next);
        Some(deliver(
            &bytemuck::cast_slice::<u64, u8>(&words)[..len],
            stamp,
        ))
    }

    fn take_slot(&self) -> Option<Message> {
        let (slot, next) = self.published()?;
        let tag = slot.tag.load(Ordering::Relaxed);
        let meta = slot.meta.load(Ordering::Relaxed);
        let stamp = slot.stamp(meta);
        let payload = if meta & BULK != 0 {
            // The sender queued the buffer before publishing the slot.
            let buf = lock(&self.bulk).pop_front();
            Payload::Heap(buf.expect("a bulk slot's buffer is queued before the slot is published"))
        } else {
            let mut words = [0u64; INLINE_WORDS];
            let len = slot.read_inline(meta, &mut words);
            Payload::Inline { len, words }
        };
        self.release(next);
        Some(Message {
            tag,
            payload,
            stamp,
        })
    }

    /// The ring's next slot and its ticket, if the sender has published it.
    #[inline]
    fn published(&self) -> Option<(&Slot, u64)> {
        // Only this (receiving) rank writes `head`.
        let next = self.head.0.load(Ordering::Relaxed);
        let slot = &self.ring[(next % RING) as usize];
        (slot.seq.load(Ordering::Acquire) == next + 1).then_some((slot, next))
    }

    /// Every read of slot `ticket` is done: the sender may reuse it.
    #[inline]
    fn release(&self, ticket: u64) {
        self.head.0.store(ticket + 1, Ordering::Release);
    }
}

impl Slot {
    /// The sender's stamp, if `meta` says it attached one.
    #[inline]
    fn stamp(&self, meta: u64) -> Option<f64> {
        (meta & STAMPED != 0).then(|| f64::from_bits(self.stamp.load(Ordering::Relaxed)))
    }

    /// Copy the inline payload into `words` (those past its length are left as they are)
    /// and return its length in bytes.
    #[inline]
    fn read_inline(&self, meta: u64, words: &mut [u64; INLINE_WORDS]) -> usize {
        let len = (meta & LEN_MASK) as usize;
        for (w, s) in words.iter_mut().zip(&self.words).take(len.div_ceil(8)) {
            *w = s.load(Ordering::Relaxed);
        }
        len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(m: &Message) -> Vec<u8> {
        m.payload.bytes().to_vec()
    }

    #[test]
    fn order_is_kept_across_inline_bulk_and_overflow() {
        let ch = Channel::new();
        assert!(ch.try_recv().is_none());
        // 3 * RING messages unreceived: the ring fills and the rest overflow; sizes cycle
        // through empty, inline, exactly one slot, and bulk.
        let sizes = [0usize, 5, INLINE_BYTES, INLINE_BYTES + 1, 1000];
        let n = 3 * RING as usize;
        let payload = |i: usize| -> Vec<u8> {
            (0..sizes[i % sizes.len()])
                .map(|j| (i * 31 + j) as u8)
                .collect()
        };
        let mut next: Tag = 0;
        let mut check = |m: Message| {
            assert_eq!(m.tag, next, "messages overtook one another");
            assert_eq!(m.stamp, Some(next as f64));
            assert_eq!(bytes(&m), payload(next as usize));
            next += 1;
        };
        for i in 0..n {
            ch.send(i as Tag, &payload(i), Some(i as f64), Vec::new);
            // Receive some on the way: the overflow must drain before the ring is used again.
            if i % 7 == 0 {
                check(ch.try_recv().expect("a message is waiting"));
            }
        }
        while let Some(m) = ch.try_recv() {
            check(m);
        }
        assert_eq!(next, n as Tag);
        assert!(!ch.ready());
    }

    #[test]
    fn take_inline_delivers_only_the_next_inline_message_with_its_tag() {
        let ch = Channel::new();
        let none = |_: &[u8], _: Option<f64>| -> Vec<u8> { panic!("nothing to deliver") };
        assert!(ch.take_inline(1, none).is_none(), "empty channel");
        let big: Vec<u8> = (0..INLINE_BYTES as u8 + 5).collect();
        ch.send(1, &[1, 2, 3], None, Vec::new);
        ch.send(2, &[9; 13], Some(2.5), Vec::new);
        ch.send(3, &big, None, Vec::new);
        ch.send(4, &[], None, Vec::new);
        // Tag 2 is not next: nothing is consumed.
        assert!(ch.take_inline(2, none).is_none());
        let got = ch.take_inline(1, |b, s| (b.to_vec(), s));
        assert_eq!(got, Some((vec![1, 2, 3], None)));
        let got = ch.take_inline(2, |b, s| (b.to_vec(), s));
        assert_eq!(got, Some((vec![9; 13], Some(2.5))));
        // A bulk payload is left to `try_recv`, in order.
        assert!(ch.take_inline(3, none).is_none());
        let m = ch.try_recv().expect("the bulk message is next");
        assert_eq!((m.tag, bytes(&m)), (3, big));
        let got = ch.take_inline(4, |b, s| (b.to_vec(), s));
        assert_eq!(got, Some((Vec::new(), None)));
        assert!(ch.try_recv().is_none());
    }

    #[test]
    fn two_threads_keep_order_under_pressure() {
        let ch = Channel::new();
        let n = 20_000u64;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for i in 0..n {
                    let len = (i % 130) as usize;
                    let data: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
                    ch.send(i, &data, None, Vec::new);
                }
            });
            let mut expect = 0;
            while expect < n {
                match ch.try_recv() {
                    Some(m) => {
                        assert_eq!(m.tag, expect);
                        let len = (expect % 130) as usize;
                        let want: Vec<u8> = (0..len).map(|j| (expect as usize + j) as u8).collect();
                        assert_eq!(bytes(&m), want);
                        assert_eq!(m.stamp, None);
                        expect += 1;
                    }
                    None => std::hint::spin_loop(),
                }
            }
        });
    }
}
