//! The second-answer check: after the labels are voted, each distractor a kept item would
//! publish is shown again beside the true ending, one per row, and a checker answers one
//! question: could it also be the right continuation? An ending any checker answers `yes` for is
//! set aside by [`crate::assemble`] (decision 481).
//!
//! The label round cannot ask this: its annotators are not told which ending is true, and the
//! blind reads found the second right answers that survive it to be endings every annotator
//! called unlikely, read as right once the true ending stands beside them.
//!
//! Check sheet columns: `sheet, row, item, slot, context, true_ending, candidate, could_be_right,
//! checker`; `slot` is the candidate's 1-based place on the item's label sheet (its `ending_N`),
//! `could_be_right` is `yes` or `no`. No key of its own: each row is checked against the label
//! key (the item, the slot, and both endings as exported).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::sheet::{shown_context, KeyItem, SheetError, SlotSource};

/// Header of a check sheet.
pub const CHECK_COLUMNS: [&str; 9] = [
    "sheet",
    "row",
    "item",
    "slot",
    "context",
    "true_ending",
    "candidate",
    "could_be_right",
    "checker",
];

/// One checker's answer for one shown ending.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    pub checker: String,
    pub item: String,
    /// 0-based slot on the item's label sheet.
    pub slot: usize,
    pub could_be_right: bool,
    pub file: PathBuf,
    pub line: usize,
}

/// A distractor to be checked: an item and one of its slots (0-based).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToCheck {
    pub item: String,
    pub slot: usize,
}

/// Check sheets of at most `rows_per_sheet` rows, in the order given (an item's candidates stay
/// together, so a checker reads its context and true ending once). Returns (sheet name, CSV).
pub fn check_sheets(
    key: &HashMap<String, KeyItem>,
    to_check: &[ToCheck],
    rows_per_sheet: usize,
) -> Result<Vec<(String, Vec<u8>)>, csv::Error> {
    let rows_per_sheet = rows_per_sheet.max(1);
    let mut sheets = Vec::new();
    // Cut between items where one would split across two sheets and the sheet has room left
    // for nothing else: a sheet may run short, never over.
    let mut chunks: Vec<Vec<&ToCheck>> = vec![Vec::new()];
    let mut by_item: Vec<Vec<&ToCheck>> = Vec::new();
    for t in to_check {
        match by_item.last_mut() {
            Some(group) if group[0].item == t.item => group.push(t),
            _ => by_item.push(vec![t]),
        }
    }
    for group in by_item {
        let current = chunks.last_mut().expect("one chunk");
        if !current.is_empty() && current.len() + group.len() > rows_per_sheet {
            chunks.push(Vec::new());
        }
        chunks.last_mut().expect("one chunk").extend(group);
    }
    for (s, rows) in chunks.into_iter().filter(|c| !c.is_empty()).enumerate() {
        let name = format!("check-{:03}", s + 1);
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(CHECK_COLUMNS)?;
        for (r, t) in rows.iter().enumerate() {
            let k = &key[&t.item];
            w.write_record([
                name.as_str(),
                &(r + 1).to_string(),
                &k.item,
                &(t.slot + 1).to_string(),
                &shown_context(k),
                &k.slots[k.found()].ending,
                &k.slots[t.slot].ending,
                "",
                "",
            ])?;
        }
        sheets.push((name, w.into_inner().map_err(|e| e.into_error())?));
    }
    Ok(sheets)
}

/// Reads a filled check sheet against the label key. Returns the good rows and, with `skip_bad`,
/// the bad ones as errors (without it, the first bad row is the error).
pub fn read_check_sheet(
    path: &Path,
    key: &HashMap<String, KeyItem>,
    skip_bad: bool,
) -> Result<(Vec<Check>, Vec<SheetError>), SheetError> {
    let file_error = |message: String| SheetError::File {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|source| SheetError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(text.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| file_error(e.to_string()))?
        .iter()
        .map(str::to_string)
        .collect();
    let col = |name: &str| header.iter().position(|h| h == name);
    if let Some(missing) = CHECK_COLUMNS
        .iter()
        .find(|c| **c != "checker" && col(c).is_none())
    {
        return Err(file_error(format!(
            "no column `{missing}`: is this an af check sheet (check/check-NNN.csv)?"
        )));
    }
    let default_checker = path
        .file_stem()
        .map_or("checker".into(), |s| s.to_string_lossy().into_owned());
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    let mut seen: HashSet<(String, String, usize)> = HashSet::new();
    for record in reader.records() {
        let record = record.map_err(|e| file_error(e.to_string()))?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        let get = |name: &str| {
            col(name)
                .and_then(|c| record.get(c))
                .unwrap_or("")
                .trim()
                .to_string()
        };
        let row = parse_check(&get, key).and_then(|(item, slot, could_be_right)| {
            let checker = Some(get("checker"))
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| default_checker.clone());
            if !seen.insert((checker.clone(), item.clone(), slot)) {
                return Err(format!(
                    "`{checker}` already checked slot {} of item `{item}` in this file",
                    slot + 1
                ));
            }
            Ok(Check {
                checker,
                item,
                slot,
                could_be_right,
                file: path.to_path_buf(),
                line,
            })
        });
        match row {
            Ok(c) => good.push(c),
            Err(message) => {
                let e = SheetError::Row {
                    path: path.to_path_buf(),
                    line,
                    message,
                };
                if !skip_bad {
                    return Err(e);
                }
                bad.push(e);
            }
        }
    }
    Ok((good, bad))
}

fn parse_check(
    get: &dyn Fn(&str) -> String,
    key: &HashMap<String, KeyItem>,
) -> Result<(String, usize, bool), String> {
    let item = get("item");
    let k = key
        .get(&item)
        .ok_or_else(|| format!("item `{item}` is not in the label key"))?;
    let slot_text = get("slot");
    let slot = slot_text
        .parse::<usize>()
        .ok()
        .filter(|s| (1..=k.slots.len()).contains(s))
        .ok_or_else(|| {
            format!(
                "slot is {slot_text:?}, expected a number from 1 to {} (the ending's place on the label sheet)",
                k.slots.len()
            )
        })?
        - 1;
    if k.slots[slot].source == SlotSource::Found {
        return Err(format!(
            "slot {} of item `{item}` is its true ending, not a candidate",
            slot + 1
        ));
    }
    if get("candidate") != k.slots[slot].ending.trim() {
        return Err(format!(
            "candidate of item `{item}` differs from its slot {} as exported",
            slot + 1
        ));
    }
    if get("true_ending") != k.slots[k.found()].ending.trim() {
        return Err(format!(
            "true_ending of item `{item}` differs from the sheet as exported"
        ));
    }
    let answer = get("could_be_right").to_lowercase();
    let could_be_right = match answer.as_str() {
        "yes" => true,
        "no" => false,
        other => return Err(format!("could_be_right is {other:?}, expected yes or no")),
    };
    Ok((item, slot, could_be_right))
}

/// The (item, slot) pairs any checker answered `yes` for, and every pair checked at all.
pub fn flagged_and_checked(checks: &[Check]) -> (HashSet<ToCheck>, HashSet<ToCheck>) {
    let (mut flagged, mut checked) = (HashSet::new(), HashSet::new());
    for c in checks {
        let t = ToCheck {
            item: c.item.clone(),
            slot: c.slot,
        };
        if c.could_be_right {
            flagged.insert(t.clone());
        }
        checked.insert(t);
    }
    (flagged, checked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sheet::Slot;

    fn key_item(item: &str) -> KeyItem {
        KeyItem {
            sheet: "sheet-001".into(),
            row: 1,
            item: item.into(),
            group: item.into(),
            split: "train".into(),
            context: "A man stands on a roof.".into(),
            prefix: "He".into(),
            slots: (0..4)
                .map(|s| Slot {
                    source: if s == 1 {
                        SlotSource::Found
                    } else {
                        SlotSource::Generated
                    },
                    candidate: s,
                    ending: format!("ending {s} of {item}, with a comma"),
                })
                .collect(),
            replacements: vec![],
        }
    }

    fn key() -> HashMap<String, KeyItem> {
        ["a", "b", "c"]
            .map(|i| (i.to_string(), key_item(i)))
            .into_iter()
            .collect()
    }

    fn to_check(item: &str, slots: &[usize]) -> Vec<ToCheck> {
        slots
            .iter()
            .map(|&slot| ToCheck {
                item: item.into(),
                slot,
            })
            .collect()
    }

    /// Fills every row of a sheet with one checker's answers: `yes` where `flag` says so.
    fn fill(csv_bytes: &[u8], checker: &str, flag: &dyn Fn(&str, &str) -> bool) -> String {
        let mut r = csv::Reader::from_reader(csv_bytes);
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(r.headers().unwrap()).unwrap();
        for rec in r.records() {
            let mut rec: Vec<String> = rec.unwrap().iter().map(str::to_string).collect();
            rec[7] = if flag(&rec[2], &rec[3]) { "yes" } else { "no" }.into();
            rec[8] = checker.into();
            w.write_record(&rec).unwrap();
        }
        String::from_utf8(w.into_inner().unwrap()).unwrap()
    }

    #[test]
    fn sheets_keep_an_items_candidates_together_and_read_back() {
        let key = key();
        let rows: Vec<ToCheck> = [
            to_check("a", &[0, 2, 3]),
            to_check("b", &[0, 3]),
            to_check("c", &[2]),
        ]
        .concat();
        let sheets = check_sheets(&key, &rows, 4).unwrap();
        // a's three fit the first sheet; b's two would run it to five, so they open the next.
        let names: Vec<&str> = sheets.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["check-001", "check-002"]);
        let text = String::from_utf8(sheets[0].1.clone()).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.contains("A man stands on a roof. He ...,\"ending 1 of a, with a comma\""));
        let dir = tempfile::tempdir().unwrap();
        let mut checks = Vec::new();
        for (name, bytes) in &sheets {
            let path = dir.path().join(format!("{name}-filled.csv"));
            std::fs::write(
                &path,
                fill(bytes, "x", &|item, slot| item == "b" && slot == "4"),
            )
            .unwrap();
            checks.extend(read_check_sheet(&path, &key, false).unwrap().0);
        }
        assert_eq!(checks.len(), 6);
        let (flagged, checked) = flagged_and_checked(&checks);
        assert_eq!(flagged, to_check("b", &[3]).into_iter().collect());
        assert_eq!(checked.len(), 6);
    }

    #[test]
    fn bad_rows_name_the_file_line_and_what_was_expected() {
        let key = key();
        let sheets = check_sheets(&key, &to_check("a", &[0, 2]), 10).unwrap();
        let good = fill(&sheets[0].1, "x", &|_, _| false);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("check-001-filled.csv");
        let error_of = |text: String| {
            std::fs::write(&path, text).unwrap();
            read_check_sheet(&path, &key, false)
                .unwrap_err()
                .to_string()
        };
        let e = error_of(good.replacen(",no,x", ",maybe,x", 1));
        assert!(
            e.ends_with(":2: could_be_right is \"maybe\", expected yes or no"),
            "{e}"
        );
        let e = error_of(good.replacen("a,1,", "a,2,", 1));
        assert!(
            e.contains(":2: slot 2 of item `a` is its true ending"),
            "{e}"
        );
        let e = error_of(good.replacen("a,3,", "a,9,", 1));
        assert!(
            e.contains(":3: slot is \"9\", expected a number from 1 to 4"),
            "{e}"
        );
        let e = error_of(good.replacen("ending 2 of a", "ending 2 of a!", 1));
        assert!(e.contains(":3: candidate of item `a` differs"), "{e}");
        let dup = format!("{good}{}", good.lines().nth(1).unwrap());
        let e = error_of(dup);
        assert!(
            e.contains(":4: `x` already checked slot 1 of item `a`"),
            "{e}"
        );
        let e = error_of("sheet,row,item\n".into());
        assert!(e.contains("no column `slot`"), "{e}");
        // With skip_bad the good row stays and the bad one is listed.
        std::fs::write(&path, good.replacen(",no,x", ",maybe,x", 1)).unwrap();
        let (ok, bad) = read_check_sheet(&path, &key, true).unwrap();
        assert_eq!((ok.len(), bad.len()), (1, 1));
    }
}
