//! Special tokens in text, found as llama.cpp's partition finds them: one special token at
//! a time, longest text first, every occurrence left to right in every stretch of text not
//! yet taken, the text around each kept as stretches (minus white space on the side a
//! token strips: `lstrip` eats it before the token, `rstrip` after).

use std::ops::Range;

/// A stretch of input text, or a special token found in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Bytes of the input still to tokenize.
    Text(Range<usize>),
    /// A special token.
    Token(u32),
}

/// A special token as the partition sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Special<'v> {
    pub id: u32,
    pub text: &'v str,
    pub lstrip: bool,
    pub rstrip: bool,
}

/// C's `isspace` (what llama.cpp strips around a token).
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Splits `text` at `specials`, in the order given (llama.cpp's: longest first).
pub(crate) fn partition(text: &str, specials: &[Special<'_>]) -> Vec<Fragment> {
    let bytes = text.as_bytes();
    let mut frags = if text.is_empty() {
        Vec::new()
    } else {
        vec![Fragment::Text(0..text.len())]
    };
    let mut next = Vec::new();
    for sp in specials {
        // Cheap test first: most special tokens are not in most texts.
        if !text.contains(sp.text) {
            continue;
        }
        next.clear();
        for f in frags.drain(..) {
            let Fragment::Text(r) = f else {
                next.push(f);
                continue;
            };
            let mut base = r.start;
            let end = r.end;
            loop {
                let Some(at) = text[base..end].find(sp.text).map(|i| base + i) else {
                    next.push(Fragment::Text(base..end));
                    break;
                };
                let mut left_end = at;
                if sp.lstrip {
                    while left_end > base && is_c_space(bytes[left_end - 1]) {
                        left_end -= 1;
                    }
                }
                if left_end > base {
                    next.push(Fragment::Text(base..left_end));
                }
                next.push(Fragment::Token(sp.id));
                base = at + sp.text.len();
                if sp.rstrip {
                    while base < end && is_c_space(bytes[base]) {
                        base += 1;
                    }
                }
                if base >= end {
                    break;
                }
            }
        }
        std::mem::swap(&mut frags, &mut next);
    }
    frags
}

#[cfg(test)]
mod tests {
    use super::*;
    use Fragment::{Text, Token};

    fn sp(id: u32, text: &str) -> Special<'_> {
        Special {
            id,
            text,
            lstrip: false,
            rstrip: false,
        }
    }

    #[test]
    fn longest_first_then_left_to_right() {
        let specials = [sp(1, "<|im_start|>"), sp(2, "<|")];
        let t = "a<|im_start|>b<|c";
        assert_eq!(
            partition(t, &specials),
            [Text(0..1), Token(1), Text(13..14), Token(2), Text(16..17)]
        );
        // Back to back, and the whole text.
        assert_eq!(partition("<|<|", &specials), [Token(2), Token(2)]);
        assert_eq!(partition("", &specials), []);
        // The order given wins over position: "bcd" is taken before "ab" can be.
        assert_eq!(
            partition("abcd", &[sp(7, "bcd"), sp(8, "ab")]),
            [Text(0..1), Token(7)]
        );
    }

    #[test]
    fn strips_white_space_on_the_token_side() {
        let s = Special {
            id: 9,
            text: "<m>",
            lstrip: true,
            rstrip: true,
        };
        assert_eq!(
            partition("a \t<m>\n b", &[s]),
            [Text(0..1), Token(9), Text(8..9)]
        );
        assert_eq!(partition("  <m>  ", &[s]), [Token(9)]);
    }
}
