//! af-text owns everything af does with words before any tensor exists: tokenizing (and the
//! inverse, for exports), the vocabulary, the part-of-speech tagger, the split of a sentence into
//! its subject noun phrase and its ending, sentence splitting for prose, and the making of items
//! from documents (`af pairs`), the validity rules generated endings are checked against, and the
//! demo's caption world, written by a grammar ([`world`]). No libtorch, no I/O formats, no printing.

pub mod pairs;
pub mod sentences;
pub mod split;
pub mod tagger;
pub mod tokenize;
pub mod validity;
pub mod vocab;
pub mod world;

pub use tagger::Tagger;
pub use tokenize::{detokenize, tokenize, tokenize_lowercase};
pub use vocab::Vocab;
