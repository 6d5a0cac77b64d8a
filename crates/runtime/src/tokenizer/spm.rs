//! SentencePiece BPE as llama.cpp's SPM session runs it: the text (spaces already written
//! `▁`) starts as one symbol per UTF-8 character; the adjacent pair whose join is a token
//! of the highest score (the leftmost among equals) merges, again and again. A symbol left
//! that is not a token is written as byte-fallback tokens `<0xXX>`, one per byte.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A queued merge: the join's score, its left and right symbols, its length in bytes.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

// Best first: the higher score, then the smaller left index. Scores are finite (the
// contract checks them), so `total_cmp` orders them as `<` does.
impl Ord for Bigram {
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}

/// What the session needs from the vocabulary.
pub(crate) trait SpmVocab {
    /// The token spelled `text`, if any.
    fn token(&self, text: &str) -> Option<u32>;
    /// Its score.
    fn score(&self, id: u32) -> f32;
    /// The byte-fallback token of `b`.
    fn byte_token(&self, b: u8) -> Option<u32>;
}

/// Appends the tokens of `text`; `Err(byte)` when a byte needs a fallback token the
/// vocabulary lacks.
pub(crate) fn encode(v: &impl SpmVocab, text: &str, out: &mut Vec<u32>) -> Result<(), u8> {
    #[derive(Clone, Copy)]
    struct Sym {
        start: usize,
        len: usize,
        prev: usize,
        next: usize,
    }
    const NONE: usize = usize::MAX;
    let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let n = starts.len();
    let mut syms: Vec<Sym> = (0..n)
        .map(|i| Sym {
            start: starts[i],
            len: starts.get(i + 1).copied().unwrap_or(text.len()) - starts[i],
            prev: if i == 0 { NONE } else { i - 1 },
            next: if i + 1 == n { NONE } else { i + 1 },
        })
        .collect();
    let mut queue = BinaryHeap::new();
    let bigram = |syms: &[Sym], l: usize, r: usize, q: &mut BinaryHeap<Bigram>| {
        if l == NONE || r == NONE {
            return;
        }
        let (s, len) = (syms[l].start, syms[l].len + syms[r].len);
        if let Some(id) = v.token(&text[s..s + len]) {
            q.push(Bigram {
                score: v.score(id),
                left: l,
                right: r,
                len,
            });
        }
    };
    for i in 1..n {
        bigram(&syms, i - 1, i, &mut queue);
    }
    while let Some(b) = queue.pop() {
        let (left, right) = (syms[b.left], syms[b.right]);
        if left.len == 0 || right.len == 0 || left.len + right.len != b.len {
            continue;
        }
        syms[b.left].len = b.len;
        syms[b.left].next = right.next;
        syms[b.right].len = 0;
        if right.next != NONE {
            syms[right.next].prev = b.left;
        }
        bigram(&syms, left.prev, b.left, &mut queue);
        bigram(&syms, b.left, syms[b.left].next, &mut queue);
    }
    let mut i = if n == 0 { NONE } else { 0 };
    while i != NONE {
        let s = syms[i];
        let piece = &text[s.start..s.start + s.len];
        match v.token(piece) {
            Some(id) => out.push(id),
            // Merged symbols are tokens, so this is one character no token spells.
            None => {
                for &byte in piece.as_bytes() {
                    out.push(v.byte_token(byte).ok_or(byte)?);
                }
            }
        }
        i = s.next;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct V(HashMap<&'static str, (u32, f32)>);
    impl SpmVocab for V {
        fn token(&self, t: &str) -> Option<u32> {
            self.0.get(t).map(|x| x.0)
        }
        fn score(&self, id: u32) -> f32 {
            self.0.values().find(|x| x.0 == id).unwrap().1
        }
        fn byte_token(&self, b: u8) -> Option<u32> {
            (b != 0xFF).then_some(1000 + u32::from(b))
        }
    }

    #[test]
    fn merges_by_score_then_leftmost_with_byte_fallback() {
        let v = V(HashMap::from([
            ("a", (1, 0.0)),
            ("b", (2, 0.0)),
            ("ab", (3, -2.0)),
            ("bb", (4, -1.0)),
            ("▁", (5, 0.0)),
            ("▁a", (6, -3.0)),
        ]));
        let enc = |s: &str| {
            let mut out = Vec::new();
            encode(&v, s, &mut out).map(|()| out)
        };
        // "bb" scores above "ab": a + bb.
        assert_eq!(enc("abb"), Ok(vec![1, 4]));
        assert_eq!(enc("ab"), Ok(vec![3]));
        // Equal scores: the leftmost pair first.
        assert_eq!(enc("bbbb"), Ok(vec![4, 4]));
        assert_eq!(enc("▁ab"), Ok(vec![5, 3]));
        // é has no token: its two bytes.
        assert_eq!(enc("é"), Ok(vec![1000 + 0xC3, 1000 + 0xA9]));
        assert_eq!(enc(""), Ok(vec![]));
    }
}
