//! af-annotate owns the human check of docs/design.md §1.7, as SWAG ran it: annotation sheets with the
//! found ending and some AF distractors in a recorded random order (CSV, and an HTML form that
//! saves the same CSV), reading filled sheets back with an error per bad row, and assembling the
//! final dataset by the paper's rules (or a stricter one that keeps no ending people found
//! likely, and a second round in which checkers shown the true ending set aside second right
//! answers), with the statistics of its Table 2 and inter-annotator agreement. No libtorch, no
//! printing.

pub mod agreement;
pub mod assemble;
pub mod check;
pub mod sheet;

pub use assemble::{assemble, Assembled, DistractorRule, Outcome};
pub use check::{check_sheets, read_check_sheet, Ask, Check, CheckSheet, NextCheck, ToCheck};
pub use sheet::{
    build_key, read_sheet, reject_repeats, sheet_csv, sheet_html, Annotation, KeyItem, Label,
    SheetError, Slot, SlotSource,
};
