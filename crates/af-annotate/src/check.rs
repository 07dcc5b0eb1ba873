//! The second-answer check: after the labels are voted, each distractor an item may publish is
//! shown again beside the true ending, one per row, and a checker answers two questions: could
//! it also be the right continuation, and does it read as fluent English? An ending any checker
//! answers `could_be_right = yes` for, or most answer `fluent = no` for, is set aside by
//! [`crate::assemble`]; an item short of distractors gets its replacements (the AF distractors its
//! label sheet did not show) checked, and those that pass become usable (decisions 481, 482).
//!
//! The label round cannot ask the first question: its annotators are not told which ending is
//! true, and the blind reads found the second right answers that survive it to be endings every
//! annotator called unlikely, read as right once the true ending stands beside them.
//!
//! Check sheet columns: `sheet, row, item, slot, context, true_ending, candidate, ask,
//! could_be_right, fluent, checker`; `slot` is the candidate's 1-based place on the item's label
//! sheet (its `ending_N`), past the sheet's endings its replacements in key order; `ask` says which
//! questions the row still needs (`both`, `could_be_right` or `fluent`); `could_be_right` and
//! `fluent` are `yes`, `no` or empty (not asked), at least one of them answered. A sheet without
//! `ask` or `fluent` (the first round's) still reads. No key of its own: each row is checked
//! against the label key (the item, the slot, and both endings).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::assemble::{Decided, Outcome, MIN_DISTRACTORS};
use crate::sheet::{
    escape, read_rows, shown_context, KeyItem, SheetError, SlotSource, FORM_SAVE_SCRIPT, STYLE,
};

/// Header of a check sheet.
pub const CHECK_COLUMNS: [&str; 11] = [
    "sheet",
    "row",
    "item",
    "slot",
    "context",
    "true_ending",
    "candidate",
    "ask",
    "could_be_right",
    "fluent",
    "checker",
];

/// One checker's answer for one shown ending.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    pub checker: String,
    pub item: String,
    /// 0-based slot: on the item's label sheet, then its replacements ([`KeyItem::candidate`]).
    pub slot: usize,
    /// None: not asked on this row.
    pub could_be_right: Option<bool>,
    pub fluent: Option<bool>,
    pub file: PathBuf,
    pub line: usize,
}

/// A distractor to be checked: an item and one of its slots (0-based).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToCheck {
    pub item: String,
    pub slot: usize,
}

/// The questions a row of the next check sheets still needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    Both,
    CouldBeRight,
    Fluent,
}

impl Ask {
    /// As the `ask` column spells it.
    pub fn name(self) -> &'static str {
        match self {
            Ask::Both => "both",
            Ask::CouldBeRight => "could_be_right",
            Ask::Fluent => "fluent",
        }
    }
}

/// A row of the next check sheets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextCheck {
    pub at: ToCheck,
    pub ask: Ask,
}

/// What the checks say about one candidate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub could_be_right_answers: usize,
    pub could_be_right_yes: usize,
    pub fluent_answers: usize,
    pub fluent_yes: usize,
}

impl Verdict {
    /// One checker who reads it as a second right answer is enough (decision 481).
    pub fn could_be_right(&self) -> bool {
        self.could_be_right_yes > 0
    }

    /// More than half of the checkers asked read it as not fluent (decision 482).
    pub fn not_fluent(&self) -> bool {
        2 * (self.fluent_answers - self.fluent_yes) > self.fluent_answers
    }

    /// Both questions answered by someone.
    pub fn complete(&self) -> bool {
        self.could_be_right_answers > 0 && self.fluent_answers > 0
    }
}

/// Every checked candidate's verdict.
pub fn verdicts(checks: &[Check]) -> HashMap<ToCheck, Verdict> {
    let mut out: HashMap<ToCheck, Verdict> = HashMap::new();
    for c in checks {
        let v = out
            .entry(ToCheck {
                item: c.item.clone(),
                slot: c.slot,
            })
            .or_default();
        if let Some(yes) = c.could_be_right {
            v.could_be_right_answers += 1;
            v.could_be_right_yes += usize::from(yes);
        }
        if let Some(yes) = c.fluent {
            v.fluent_answers += 1;
            v.fluent_yes += usize::from(yes);
        }
    }
    out
}

/// What the next check sheets ask about, in key order: for every item the labels keep, or that
/// waits for want of distractors (not for a tie), its usable shown endings, and when it has fewer
/// than [`MIN_DISTRACTORS`] usable, its replacements; each only while some question about it is
/// unanswered and nothing answered so far sets it aside, and asking only what is unanswered.
pub fn next_checks(
    key: &[KeyItem],
    decided: &[Decided],
    verdicts: &HashMap<ToCheck, Verdict>,
) -> Vec<NextCheck> {
    let mut out = Vec::new();
    for (k, d) in key.iter().zip(decided) {
        // A tie on the best ending (no best) waits for labels, not for checks.
        let waiting = matches!(d.outcome, Outcome::Kept { .. })
            || (matches!(d.outcome, Outcome::Reannotate { .. }) && d.best.is_some());
        if !waiting {
            continue;
        }
        let open = |slot: usize| {
            let t = ToCheck {
                item: k.item.clone(),
                slot,
            };
            let v = verdicts.get(&t).copied().unwrap_or_default();
            let ask = match (v.could_be_right_answers > 0, v.fluent_answers > 0) {
                (false, false) => Ask::Both,
                (false, true) => Ask::CouldBeRight,
                (true, false) => Ask::Fluent,
                (true, true) => return None,
            };
            (!v.could_be_right() && !v.not_fluent()).then_some(NextCheck { at: t, ask })
        };
        out.extend(d.usable.iter().filter_map(|&s| open(s)));
        if d.usable.len() < MIN_DISTRACTORS {
            out.extend((k.slots.len()..k.candidates()).filter_map(open));
        }
    }
    out
}

/// One check sheet: its name, the CSV, and the same sheet as a form.
pub struct CheckSheet {
    pub name: String,
    pub csv: Vec<u8>,
    pub html: String,
}

/// Check sheets of at most `rows_per_sheet` rows, in the order given (an item's candidates stay
/// together, so a checker reads its context and true ending once).
pub fn check_sheets(
    key: &HashMap<String, KeyItem>,
    to_check: &[NextCheck],
    rows_per_sheet: usize,
) -> Result<Vec<CheckSheet>, csv::Error> {
    let rows_per_sheet = rows_per_sheet.max(1);
    // A sheet ends before an item that would run it past `rows_per_sheet`: an item's rows are
    // never split, so a sheet may run short, never over (unless one item alone is longer).
    let mut sheet_rows: Vec<&[NextCheck]> = Vec::new();
    let mut start = 0;
    let mut end = 0;
    for group in to_check.chunk_by(|a, b| a.at.item == b.at.item) {
        if end > start && end - start + group.len() > rows_per_sheet {
            sheet_rows.push(&to_check[start..end]);
            start = end;
        }
        end += group.len();
    }
    if end > start {
        sheet_rows.push(&to_check[start..end]);
    }
    let mut sheets = Vec::new();
    for (s, rows) in sheet_rows.into_iter().enumerate() {
        let name = format!("check-{:03}", s + 1);
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(CHECK_COLUMNS)?;
        for (r, t) in rows.iter().enumerate() {
            let k = &key[&t.at.item];
            w.write_record([
                name.as_str(),
                &(r + 1).to_string(),
                &k.item,
                &(t.at.slot + 1).to_string(),
                &shown_context(k),
                &k.slots[k.found()].ending,
                &k.candidate(t.at.slot).ending,
                t.ask.name(),
                "",
                "",
                "",
            ])?;
        }
        let csv = w.into_inner().map_err(|e| e.into_error())?;
        let html = check_sheet_html(&name, key, rows);
        sheets.push(CheckSheet { name, csv, html });
    }
    Ok(sheets)
}

/// The sheet as a form: per item its context and true ending, per candidate a yes/no for each
/// question the row asks; "Save CSV" writes `NAME-filled.csv` in the CSV layout (the page's only
/// script builds that file; nothing is sent anywhere).
fn check_sheet_html(name: &str, key: &HashMap<String, KeyItem>, rows: &[NextCheck]) -> String {
    let mut body = String::new();
    let mut open_item: Option<&str> = None;
    for (r, t) in rows.iter().enumerate() {
        let k = &key[&t.at.item];
        if open_item != Some(k.item.as_str()) {
            if open_item.is_some() {
                body.push_str("</table></fieldset>\n");
            }
            open_item = Some(k.item.as_str());
            let (item, context, gold) = (
                escape(&k.item),
                escape(&shown_context(k)),
                escape(&k.slots[k.found()].ending),
            );
            body.push_str(&format!(
                "<fieldset data-item=\"{item}\" data-context=\"{context}\" data-true=\"{gold}\"><legend>{item}</legend><p>{context}</p><p>True ending: <b>{gold}</b></p><table><tr><th>candidate</th><th>could also be right?</th><th>fluent?</th></tr>",
            ));
        }
        let row = r + 1;
        let radios = |question: &str, asked: bool| -> String {
            if !asked {
                return "<td>(answered)</td>".into();
            }
            let inputs: String = ["yes", "no"]
                .iter()
                .map(|v| {
                    format!("<label><input type=\"radio\" name=\"r{row}{question}\" value=\"{v}\"> {v}</label> ")
                })
                .collect();
            format!("<td>{inputs}</td>")
        };
        body.push_str(&format!(
            "<tr data-row=\"{row}\" data-slot=\"{}\" data-ask=\"{}\" data-candidate=\"{}\"><td>{}</td>{}{}</tr>",
            t.at.slot + 1,
            t.ask.name(),
            escape(&k.candidate(t.at.slot).ending),
            escape(&k.candidate(t.at.slot).ending),
            radios("c", t.ask != Ask::Fluent),
            radios("f", t.ask != Ask::CouldBeRight),
        ));
    }
    if open_item.is_some() {
        body.push_str("</table></fieldset>\n");
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{name}</title><style>{STYLE}</style></head><body>\n\
         <h1>Check {name}</h1><p>Each candidate is a wrong answer the dataset will offer. Could it also be a right continuation of the context, beside the true ending? Does it read as fluent, sensible English? Answer what each row asks; save writes <code>{name}-filled.csv</code>; send that file back.</p>\n\
         <p><label>Your name: <input id=\"checker\"></label> <button onclick=\"save()\">Save CSV</button> <span id=\"status\"></span></p>\n{body}\
         <script>const SHEET=\"{name}\";const HEADER={header:?};{FORM_SAVE_SCRIPT}{CHECK_SCRIPT}</script></body></html>\n",
        header = CHECK_COLUMNS,
    )
}

const CHECK_SCRIPT: &str = r#"
function save(){
  const who=document.getElementById('checker').value.trim();
  if(!who){alert('Please enter your name.');return;}
  const lines=[HEADER.join(',')];const missing=[];
  for(const f of document.querySelectorAll('fieldset')){
    for(const tr of f.querySelectorAll('tr[data-row]')){
      const row=tr.dataset.row;
      const pick=(k)=>{const i=tr.querySelector('input[name="r'+row+k+'"]:checked');return i?i.value:'';};
      const c=pick('c'),fl=pick('f');
      if((tr.dataset.ask!=='fluent'&&!c)||(tr.dataset.ask!=='could_be_right'&&!fl))missing.push(row);
      lines.push([SHEET,row,f.dataset.item,tr.dataset.slot,f.dataset.context,f.dataset.true,tr.dataset.candidate,tr.dataset.ask,c,fl,who].map(q).join(','));
    }
  }
  download(lines,missing);
}
"#;

/// Reads a filled check sheet against the label key. Returns the good rows and, with `skip_bad`,
/// the bad ones as errors (without it, the first bad row is the error). One checker answering one
/// candidate twice is caught across files by [`crate::sheet::reject_repeats`].
pub fn read_check_sheet(
    path: &Path,
    key: &HashMap<String, KeyItem>,
    skip_bad: bool,
) -> Result<(Vec<Check>, Vec<SheetError>), SheetError> {
    // Named by the whole path: filled sheets of one name in different folders are different
    // checkers' unless the column says otherwise.
    let default_checker = path.display().to_string();
    let required: Vec<&str> = CHECK_COLUMNS
        .into_iter()
        .filter(|c| !matches!(*c, "checker" | "fluent" | "ask"))
        .collect();
    read_rows(
        path,
        &required,
        "an af check sheet (check/check-NNN.csv)",
        skip_bad,
        |get, line| {
            parse_check(get, key).map(|(item, slot, could_be_right, fluent)| Check {
                checker: Some(get("checker"))
                    .filter(|c| !c.is_empty())
                    .unwrap_or_else(|| default_checker.clone()),
                item,
                slot,
                could_be_right,
                fluent,
                file: path.to_path_buf(),
                line,
            })
        },
    )
}

type ParsedCheck = (String, usize, Option<bool>, Option<bool>);

fn parse_check(
    get: &dyn Fn(&str) -> String,
    key: &HashMap<String, KeyItem>,
) -> Result<ParsedCheck, String> {
    let item = get("item");
    let k = key
        .get(&item)
        .ok_or_else(|| format!("item `{item}` is not in the label key"))?;
    let slot_text = get("slot");
    let slot = slot_text
        .parse::<usize>()
        .ok()
        .filter(|s| (1..=k.candidates()).contains(s))
        .ok_or_else(|| {
            format!(
                "slot is {slot_text:?}, expected a number from 1 to {} (the ending's place on the label sheet, then its replacements)",
                k.candidates()
            )
        })?
        - 1;
    if k.candidate(slot).source == SlotSource::Found {
        return Err(format!(
            "slot {} of item `{item}` is its true ending, not a candidate",
            slot + 1
        ));
    }
    if get("candidate") != k.candidate(slot).ending.trim() {
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
    let answer = |column: &str| match get(column).to_lowercase().as_str() {
        "yes" => Ok(Some(true)),
        "no" => Ok(Some(false)),
        "" => Ok(None),
        other => Err(format!(
            "{column} is {other:?}, expected yes, no or nothing"
        )),
    };
    let (could_be_right, fluent) = (answer("could_be_right")?, answer("fluent")?);
    if could_be_right.is_none() && fluent.is_none() {
        return Err("neither could_be_right nor fluent is answered".into());
    }
    Ok((item, slot, could_be_right, fluent))
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
            replacements: vec![Slot {
                source: SlotSource::Generated,
                candidate: 9,
                ending: format!("the replacement of {item}"),
            }],
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

    fn ask_both(at: Vec<ToCheck>) -> Vec<NextCheck> {
        at.into_iter()
            .map(|at| NextCheck { at, ask: Ask::Both })
            .collect()
    }

    /// Fills every row of a sheet with one checker's answers: `yes` where `flag` says so.
    fn fill(csv_bytes: &[u8], checker: &str, flag: &dyn Fn(&str, &str) -> bool) -> String {
        let mut r = csv::Reader::from_reader(csv_bytes);
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(r.headers().unwrap()).unwrap();
        for rec in r.records() {
            let mut rec: Vec<String> = rec.unwrap().iter().map(str::to_string).collect();
            assert_eq!(rec[7], "both");
            rec[8] = if flag(&rec[2], &rec[3]) { "yes" } else { "no" }.into();
            rec[9] = "yes".into();
            rec[10] = checker.into();
            w.write_record(&rec).unwrap();
        }
        String::from_utf8(w.into_inner().unwrap()).unwrap()
    }

    #[test]
    fn sheets_keep_an_items_candidates_together_and_read_back() {
        let key = key();
        // b's slot 4 is its replacement.
        let rows = ask_both(
            [
                to_check("a", &[0, 2, 3]),
                to_check("b", &[0, 4]),
                to_check("c", &[2]),
            ]
            .concat(),
        );
        let sheets = check_sheets(&key, &rows, 4).unwrap();
        // a's three fit the first sheet; b's two would run it to five, so they open the next.
        let names: Vec<&str> = sheets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["check-001", "check-002"]);
        let text = String::from_utf8(sheets[0].csv.clone()).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.contains("A man stands on a roof. He ...,\"ending 1 of a, with a comma\""));
        let second = String::from_utf8(sheets[1].csv.clone()).unwrap();
        assert!(second.contains("b,5,A man stands"), "{second}");
        assert!(second.contains("replacement of b"), "{second}");
        let dir = tempfile::tempdir().unwrap();
        let mut checks = Vec::new();
        for sheet in &sheets {
            let path = dir.path().join(format!("{}-filled.csv", sheet.name));
            std::fs::write(
                &path,
                fill(&sheet.csv, "x", &|item, slot| item == "b" && slot == "5"),
            )
            .unwrap();
            checks.extend(read_check_sheet(&path, &key, false).unwrap().0);
        }
        assert_eq!(checks.len(), 6);
        let v = verdicts(&checks);
        assert_eq!(v.len(), 6);
        let flagged: Vec<&ToCheck> = v
            .iter()
            .filter(|(_, v)| v.could_be_right())
            .map(|(t, _)| t)
            .collect();
        assert_eq!(flagged, [&to_check("b", &[4])[0]]);
        assert!(v.values().all(|v| v.complete() && !v.not_fluent()));
    }

    #[test]
    fn the_form_asks_only_the_open_questions_and_saves_the_csv_layout() {
        let key = key();
        let rows = vec![
            NextCheck {
                at: to_check("a", &[0])[0].clone(),
                ask: Ask::Both,
            },
            NextCheck {
                at: to_check("a", &[2])[0].clone(),
                ask: Ask::Fluent,
            },
            NextCheck {
                at: to_check("b", &[4])[0].clone(),
                ask: Ask::CouldBeRight,
            },
        ];
        let html = &check_sheets(&key, &rows, 10).unwrap()[0].html;
        // One fieldset per item, radios only for what each row asks.
        assert_eq!(html.matches("<fieldset").count(), 2);
        for name in ["r1c", "r1f", "r2f", "r3c"] {
            assert_eq!(
                html.matches(&format!("name=\"r{}\"", &name[1..])).count(),
                2,
                "{name}"
            );
        }
        assert!(!html.contains("name=\"r2c\"") && !html.contains("name=\"r3f\""));
        assert_eq!(html.matches("(answered)").count(), 2);
        // The saved file's header is the CSV sheet's, and text is escaped in attributes.
        assert!(html.contains(&format!("const HEADER={:?};", CHECK_COLUMNS)));
        assert!(html.contains("data-true=\"ending 1 of a, with a comma\""));
        assert!(html.contains("data-candidate=\"the replacement of b\""));
    }

    #[test]
    fn bad_rows_name_the_file_line_and_what_was_expected() {
        let key = key();
        let sheets = check_sheets(&key, &ask_both(to_check("a", &[0, 2])), 10).unwrap();
        let good = fill(&sheets[0].csv, "x", &|_, _| false);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("check-001-filled.csv");
        let error_of = |text: String| {
            std::fs::write(&path, text).unwrap();
            read_check_sheet(&path, &key, false)
                .unwrap_err()
                .to_string()
        };
        let e = error_of(good.replacen(",both,no,yes,x", ",both,maybe,yes,x", 1));
        assert!(
            e.ends_with(":2: could_be_right is \"maybe\", expected yes, no or nothing"),
            "{e}"
        );
        let e = error_of(good.replacen(",both,no,yes,x", ",both,,,x", 1));
        assert!(
            e.ends_with(":2: neither could_be_right nor fluent is answered"),
            "{e}"
        );
        let e = error_of(good.replacen("a,1,", "a,2,", 1));
        assert!(
            e.contains(":2: slot 2 of item `a` is its true ending"),
            "{e}"
        );
        let e = error_of(good.replacen("a,3,", "a,9,", 1));
        assert!(
            e.contains(":3: slot is \"9\", expected a number from 1 to 5"),
            "{e}"
        );
        let e = error_of(good.replacen("ending 2 of a", "ending 2 of a!", 1));
        assert!(e.contains(":3: candidate of item `a` differs"), "{e}");
        let e = error_of("sheet,row,item\n".into());
        assert!(e.contains("no column `slot`"), "{e}");
        // With skip_bad the good row stays and the bad one is listed.
        std::fs::write(
            &path,
            good.replacen(",both,no,yes,x", ",both,maybe,yes,x", 1),
        )
        .unwrap();
        let (ok, bad) = read_check_sheet(&path, &key, true).unwrap();
        assert_eq!((ok.len(), bad.len()), (1, 1));
        // A sheet of the first round, with no `ask` or `fluent` column, answers could_be_right
        // only.
        let legacy = good
            .replace(",ask,could_be_right,fluent,", ",could_be_right,")
            .replace(",both,no,yes,x", ",no,x");
        std::fs::write(&path, legacy).unwrap();
        let (ok, _) = read_check_sheet(&path, &key, false).unwrap();
        assert!(ok
            .iter()
            .all(|c| c.could_be_right == Some(false) && c.fluent.is_none()));
    }

    #[test]
    fn one_checkers_second_answer_is_an_error_across_files() {
        let key = key();
        let sheets = check_sheets(&key, &ask_both(to_check("a", &[0, 2])), 10).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut checks = Vec::new();
        // The same sheet filled by x twice, under two file names.
        for name in ["first.csv", "again.csv"] {
            let path = dir.path().join(name);
            std::fs::write(&path, fill(&sheets[0].csv, "x", &|_, _| false)).unwrap();
            checks.extend(read_check_sheet(&path, &key, false).unwrap().0);
        }
        let repeat = |skip_bad| {
            crate::sheet::reject_repeats(
                checks.clone(),
                skip_bad,
                |c: &Check| {
                    (
                        c.checker.clone(),
                        format!("slot {} of item `{}`", c.slot + 1, c.item),
                    )
                },
                |c: &Check| (c.file.clone(), c.line),
            )
        };
        let e = repeat(false).unwrap_err().to_string();
        assert!(
            e.contains("again.csv:2: `x` already answered slot 1 of item `a` at ")
                && e.contains("first.csv:2"),
            "{e}"
        );
        let (kept, bad) = repeat(true).unwrap();
        assert_eq!((kept.len(), bad.len()), (2, 2));
        // An empty checker column names the checker by the file's path: two people's sheets of
        // one file name, in two folders, do not collide.
        let mut unnamed = Vec::new();
        for folder in ["p", "q"] {
            let path = dir.path().join(folder).join("check-001-filled.csv");
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, fill(&sheets[0].csv, "", &|_, _| false)).unwrap();
            unnamed.extend(read_check_sheet(&path, &key, false).unwrap().0);
        }
        assert_eq!(unnamed[0].checker, unnamed[0].file.display().to_string());
        let ok = crate::sheet::reject_repeats(
            unnamed,
            false,
            |c: &Check| (c.checker.clone(), format!("{} {}", c.item, c.slot)),
            |c: &Check| (c.file.clone(), c.line),
        );
        assert_eq!(ok.unwrap().0.len(), 4);
    }
}
