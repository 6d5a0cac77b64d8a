//! Byte-level BPE as llama.cpp's BPE session runs it: each piece of the pre-tokenized text
//! starts as one symbol per byte (the token spelling that byte in GPT-2's alphabet), then
//! the adjacent pair whose merge ranks first (the leftmost among equals) merges, again and
//! again, until no pair has a merge.
//!
//! Merges are keyed by token ids: the contract proved both sides of every merge and their
//! join are tokens. A byte whose one-character spelling is not a token (StarCoder has none
//! for bytes UTF-8 never uses) is a symbol nothing merges with, and llama.cpp, finding no
//! token for it and none for any byte of its two-byte spelling, drops it: so does this.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The merges of a vocabulary.
#[derive(Debug, Default)]
pub(crate) struct Merges {
    /// `(left, right)` → `(rank, joined)`, first listing kept.
    pairs: foldhash::HashMap<u64, (u32, u32)>,
}

fn key(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

impl Merges {
    /// Merges from `(left, right, joined)` token ids in priority order.
    pub fn new(list: impl ExactSizeIterator<Item = (u32, u32, u32)>) -> Merges {
        let mut pairs = foldhash::HashMap::with_capacity_and_hasher(list.len(), Default::default());
        for (rank, (l, r, j)) in list.enumerate() {
            pairs.entry(key(l, r)).or_insert((rank as u32, j));
        }
        Merges { pairs }
    }

    fn get(&self, left: u32, right: u32) -> Option<(u32, u32)> {
        self.pairs.get(&key(left, right)).copied()
    }

    /// Appends the tokens of `piece`, whose bytes start as the symbols `byte_token` gives.
    pub fn encode(&self, piece: &[u8], byte_token: &[Option<u32>; 256], out: &mut Vec<u32>) {
        #[derive(Clone, Copy)]
        struct Sym {
            id: Option<u32>,
            len: usize,
            prev: usize,
            next: usize,
        }
        const NONE: usize = usize::MAX;
        let n = piece.len();
        let mut syms: Vec<Sym> = piece
            .iter()
            .enumerate()
            .map(|(i, &b)| Sym {
                id: byte_token[usize::from(b)],
                len: 1,
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == n { NONE } else { i + 1 },
            })
            .collect();
        // (rank, left) ascending: the best merge, leftmost among equals; then right and the
        // pair's length when queued, to tell a stale entry.
        let mut queue: BinaryHeap<Reverse<(u32, usize, usize, usize)>> = BinaryHeap::new();
        let bigram = |syms: &[Sym], l: usize, r: usize, q: &mut BinaryHeap<_>| {
            if l == NONE || r == NONE {
                return;
            }
            if let (Some(a), Some(b)) = (syms[l].id, syms[r].id) {
                if let Some((rank, _)) = self.get(a, b) {
                    q.push(Reverse((rank, l, r, syms[l].len + syms[r].len)));
                }
            }
        };
        for i in 1..n {
            bigram(&syms, i - 1, i, &mut queue);
        }
        while let Some(Reverse((_, l, r, len))) = queue.pop() {
            let (left, right) = (syms[l], syms[r]);
            if left.len == 0 || right.len == 0 || left.len + right.len != len {
                continue;
            }
            // Both ids exist: the pair was queued with them and neither symbol changed.
            let joined = left
                .id
                .zip(right.id)
                .and_then(|(a, b)| self.get(a, b))
                .map(|(_, j)| j);
            syms[l].id = joined;
            syms[l].len = len;
            syms[l].next = right.next;
            syms[r].len = 0;
            if right.next != NONE {
                syms[right.next].prev = l;
            }
            bigram(&syms, left.prev, l, &mut queue);
            bigram(&syms, l, syms[l].next, &mut queue);
        }
        out.extend(syms.iter().filter(|s| s.len > 0).filter_map(|s| s.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_by_rank_then_leftmost() {
        // Tokens: a=0 b=1 c=2 ab=3 bc=4 abc=5; "bc" ranks before "ab".
        let m = Merges::new([(1, 2, 4), (0, 1, 3), (0, 4, 5)].into_iter());
        let mut bytes = [None; 256];
        bytes[usize::from(b'a')] = Some(0);
        bytes[usize::from(b'b')] = Some(1);
        bytes[usize::from(b'c')] = Some(2);
        let enc = |s: &str| {
            let mut out = Vec::new();
            m.encode(s.as_bytes(), &bytes, &mut out);
            out
        };
        assert_eq!(enc("abc"), [5]);
        assert_eq!(enc("ab"), [3]);
        assert_eq!(enc("abab"), [3, 3]);
        // "bcbc": the left "bc" first, then the right one.
        assert_eq!(enc("bcbc"), [4, 4]);
        // A byte without a token is dropped, and merges around it still happen.
        assert_eq!(enc("ab!bc"), [3, 4]);
        assert_eq!(enc(""), Vec::<u32>::new());
    }
}
