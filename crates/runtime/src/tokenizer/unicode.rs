//! What the pre-tokenizers ask of a code point, with llama.cpp's answers: its general
//! category class (from the Unicode 15.1 tables llama.cpp `src/unicode-data.cpp` is
//! generated from, rebuilt here by `scripts/gen-unicode-tables.py`), whether it is white
//! space, whether it is a Han ideograph (the Kimi K2 split's own ranges), and the one-byte
//! stand-in it gets when a regex rule runs on category classes instead of code points.

use super::unicode_data::CLASS_RUNS;

/// A code point's general category, by its first letter (`Cn`, unassigned, apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// `Cn`: not assigned.
    Undefined,
    /// `N*`.
    Number,
    /// `L*`.
    Letter,
    /// `Z*`.
    Separator,
    /// `M*`.
    Mark,
    /// `P*`.
    Punctuation,
    /// `S*`.
    Symbol,
    /// `Cc`, `Cf`, `Co`, `Cs`.
    Control,
}

/// The Unicode `White_Space` property (PropList.txt): the code points llama.cpp's splits
/// treat as `\s`.
const WHITE_SPACE: [u32; 25] = [
    0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
    0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
];

/// What a split asks about one code point of its piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flags {
    pub class: Class,
    pub whitespace: bool,
}

impl Flags {
    pub fn is_letter(self) -> bool {
        self.class == Class::Letter
    }
    pub fn is_number(self) -> bool {
        self.class == Class::Number
    }
    pub fn is_mark(self) -> bool {
        self.class == Class::Mark
    }
}

/// The class of `cp` (any `u32`; beyond U+10FFFF: undefined).
pub(crate) fn class(cp: u32) -> Class {
    if cp > 0x10FFFF {
        return Class::Undefined;
    }
    // The runs start at 0, so the partition point is at least 1.
    let i = CLASS_RUNS.partition_point(|&(start, _)| start <= cp);
    CLASS_RUNS[i - 1].1
}

/// `cp`'s flags.
pub(crate) fn flags(cp: u32) -> Flags {
    Flags {
        class: class(cp),
        whitespace: is_whitespace(cp),
    }
}

/// Whether `cp` is white space (Unicode `White_Space`).
pub(crate) fn is_whitespace(cp: u32) -> bool {
    WHITE_SPACE.binary_search(&cp).is_ok()
}

/// Whether `cp` is a Han ideograph as Kimi K2's split counts them: the CJK Unified
/// Ideographs block and its extensions A to F, and the two compatibility blocks.
pub(crate) fn is_han(cp: u32) -> bool {
    matches!(cp,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B820..=0x2CEAF
        | 0x2CEB0..=0x2EBEF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// `cp` lower-cased for the English contractions (`'s`, `'RE`, …). Of all simple
/// lower-case mappings in the Unicode data, only the ASCII capitals map to the letters
/// those contractions spell (the two other mappings into ASCII, U+0130 → `i` and U+212A
/// → `k`, land elsewhere), so ASCII lower-casing gives llama.cpp's answer.
pub(crate) fn lower_for_contraction(cp: u32) -> u32 {
    if (u32::from(b'A')..=u32::from(b'Z')).contains(&cp) {
        cp + 32
    } else {
        cp
    }
}

/// The byte a regex rule over category classes sees for `cp`: ASCII as itself; other white
/// space as a vertical tab (so `\s` still matches it); other code points as one byte per
/// class (letters 0xD2, numbers 0xD1, punctuation 0xD3, marks 0xD4, symbols 0xD5,
/// everything else 0xD0). A class `\p{L}` then reads `[\xD2A-Za-z]`, and so on.
pub(crate) fn collapsed(cp: u32) -> u8 {
    if cp < 0x80 {
        return cp as u8;
    }
    if is_whitespace(cp) {
        return 0x0B;
    }
    match class(cp) {
        Class::Number => COLLAPSED_NUMBER,
        Class::Letter => COLLAPSED_LETTER,
        Class::Punctuation => COLLAPSED_PUNCTUATION,
        Class::Mark => COLLAPSED_MARK,
        Class::Symbol => COLLAPSED_SYMBOL,
        Class::Undefined | Class::Separator | Class::Control => COLLAPSED_OTHER,
    }
}

/// Stand-in byte of a non-ASCII code point of no class a regex asks about.
pub(crate) const COLLAPSED_OTHER: u8 = 0xD0;
/// Stand-in byte of a non-ASCII number.
pub(crate) const COLLAPSED_NUMBER: u8 = 0xD1;
/// Stand-in byte of a non-ASCII letter.
pub(crate) const COLLAPSED_LETTER: u8 = 0xD2;
/// Stand-in byte of non-ASCII punctuation.
pub(crate) const COLLAPSED_PUNCTUATION: u8 = 0xD3;
/// Stand-in byte of a non-ASCII mark.
pub(crate) const COLLAPSED_MARK: u8 = 0xD4;
/// Stand-in byte of a non-ASCII symbol.
pub(crate) const COLLAPSED_SYMBOL: u8 = 0xD5;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_unicode_15_1_and_well_formed() {
        // llama.cpp's tables are Unicode 15.1: moving ours is a deliberate regeneration.
        assert_eq!(super::super::unicode_data::UNICODE_VERSION, "15.1.0");
        assert_eq!(CLASS_RUNS[0].0, 0);
        assert!(CLASS_RUNS
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 != w[1].1));
        assert!(CLASS_RUNS.last().unwrap().0 <= 0x10FFFF);
    }

    #[test]
    fn classes_of_known_code_points() {
        for (cp, want) in [
            (u32::from('a'), Class::Letter),
            (u32::from('Z'), Class::Letter),
            (u32::from('7'), Class::Number),
            (u32::from(' '), Class::Separator),
            (u32::from('\n'), Class::Control),
            (u32::from('$'), Class::Symbol),
            (u32::from('_'), Class::Punctuation),
            (0x00B2, Class::Number),      // superscript two
            (0x0301, Class::Mark),        // combining acute
            (0x4E2D, Class::Letter),      // 中
            (0x1F600, Class::Symbol),     // 😀
            (0xE000, Class::Control),     // private use
            (0xD800, Class::Control),     // surrogate
            (0x2EBF0, Class::Letter),     // CJK extension I: new in 15.1
            (0x10D40, Class::Undefined),  // Garay: new in 16.0, so not here
            (0x10FFFF, Class::Undefined), // noncharacter
            (0x110000, Class::Undefined), // not a code point
            (u32::MAX, Class::Undefined),
        ] {
            assert_eq!(class(cp), want, "U+{cp:04X}");
        }
    }

    #[test]
    fn whitespace_han_and_collapsing() {
        assert!(is_whitespace(0x3000) && is_whitespace(0x85) && is_whitespace(0x0B));
        assert!(!is_whitespace(0x1C) && !is_whitespace(0x200B));
        assert!(is_han(0x4E2D) && is_han(0x2F800) && !is_han(0x3042));
        assert_eq!(collapsed(u32::from('x')), b'x');
        assert_eq!(collapsed(0x3000), 0x0B);
        assert_eq!(collapsed(0xE9), COLLAPSED_LETTER);
        assert_eq!(collapsed(0x0661), COLLAPSED_NUMBER); // Arabic-Indic one
        assert_eq!(collapsed(0x00AB), COLLAPSED_PUNCTUATION);
        assert_eq!(collapsed(0x0301), COLLAPSED_MARK);
        assert_eq!(collapsed(0x20AC), COLLAPSED_SYMBOL);
        assert_eq!(collapsed(0x200B), COLLAPSED_OTHER); // zero-width space: Cf
        assert_eq!(lower_for_contraction(u32::from('S')), u32::from('s'));
        assert_eq!(lower_for_contraction(0x0130), 0x0130);
    }
}
