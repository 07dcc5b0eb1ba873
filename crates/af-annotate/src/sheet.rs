//! Sheets and their key. The key (`key.jsonl`) records, per item, which sheet and row it is on and
//! where each shown ending came from; a sheet shows only the endings, in that order.
//!
//! Sheet columns: `sheet, row, item, context, ending_1..N, label_1..N, rank_1..N, annotator`;
//! a label is `likely`, `unlikely` or `gibberish`, a rank `best`, `second` or empty, and each row
//! has exactly one `best` and one `second`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlotSource {
    /// The ending that really followed the context.
    Found,
    /// A generated ending AF assigned.
    Generated,
}

/// One ending on a sheet, or one held back as a replacement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slot {
    pub source: SlotSource,
    /// The pool's candidate id (0: the found ending).
    pub candidate: u32,
    pub ending: String,
}

/// An item as the key records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyItem {
    pub sheet: String,
    /// 1-based row on its sheet.
    pub row: usize,
    pub item: String,
    pub group: String,
    pub split: String,
    pub context: String,
    pub prefix: String,
    /// The endings shown, in sheet order.
    pub slots: Vec<Slot>,
    /// The item's other AF distractors: replacements when too few shown endings are usable.
    pub replacements: Vec<Slot>,
}

impl KeyItem {
    /// The slot of the found ending (every key item has one).
    pub fn found(&self) -> usize {
        self.slots
            .iter()
            .position(|s| s.source == SlotSource::Found)
            .expect("the key has the found ending")
    }

    /// A candidate by its place: the shown endings first, then the replacements (slot
    /// `slots.len() + j` is replacement `j`), as the second-answer check numbers them.
    pub fn candidate(&self, slot: usize) -> &Slot {
        self.slots
            .get(slot)
            .unwrap_or_else(|| &self.replacements[slot - self.slots.len()])
    }

    /// Shown endings and replacements together.
    pub fn candidates(&self) -> usize {
        self.slots.len() + self.replacements.len()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Label {
    Likely,
    Unlikely,
    Gibberish,
}

impl Label {
    pub const ALL: [Label; 3] = [Label::Likely, Label::Unlikely, Label::Gibberish];

    pub fn name(self) -> &'static str {
        match self {
            Label::Likely => "likely",
            Label::Unlikely => "unlikely",
            Label::Gibberish => "gibberish",
        }
    }
}

/// One annotator's judgement of one item.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Annotation {
    pub annotator: String,
    pub item: String,
    pub labels: Vec<Label>,
    /// Slot indices (0-based).
    pub best: usize,
    pub second: usize,
    pub file: PathBuf,
    pub line: usize,
}

#[derive(Debug, Error)]
pub enum SheetError {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Row {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
}

/// The key of a set of questions (gold first, then the AF distractors with their candidate ids):
/// each item gets the found ending and `shown` distractors (the first ones of its assignment) in
/// an order drawn from `seed` and the item id; the rest are its replacements. Items are laid out
/// on sheets by [`lay_out`]; the key lists them sheet by sheet, row by row.
pub fn build_key(
    items: &[(af_core::Question, Vec<u32>)],
    shown: usize,
    sheet_items: usize,
    seed: u64,
) -> Vec<KeyItem> {
    let key = items
        .iter()
        .map(|(q, candidates)| {
            let generated: Vec<Slot> = q.endings[1..]
                .iter()
                .zip(candidates)
                .map(|(e, &c)| Slot {
                    source: SlotSource::Generated,
                    candidate: c,
                    ending: e.clone(),
                })
                .collect();
            let n = shown.min(generated.len());
            let mut slots = vec![Slot {
                source: SlotSource::Found,
                candidate: 0,
                ending: q.endings[0].clone(),
            }];
            slots.extend(generated[..n].iter().cloned());
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                seed ^ af_core::hash::fnv1a64(q.id.as_bytes()),
            );
            slots.shuffle(&mut rng);
            KeyItem {
                sheet: String::new(),
                row: 0,
                item: q.id.clone(),
                group: q.group.clone(),
                split: q.split.clone().unwrap_or_else(|| "train".into()),
                context: q.context.clone(),
                prefix: q.prefix.clone(),
                slots,
                replacements: generated[n..].to_vec(),
            }
        })
        .collect();
    lay_out(key, sheet_items, seed)
}

/// Sheets of at most `sheet_items` rows, as even as they can be, such that no sheet holds two
/// items of one group; rows in an order drawn from `seed` (decision 477). An item's context is
/// often the found ending of the item before it in its video, and the item ids name the video:
/// a sheet holding both items of such a pair tells the annotator which ending is the found one
/// (three annotators of the first real sheets said they had used it).
fn lay_out(items: Vec<KeyItem>, sheet_items: usize, seed: u64) -> Vec<KeyItem> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5EE7_1A70);
    let mut groups: Vec<Vec<KeyItem>> = Vec::new();
    let mut group_of: HashMap<String, usize> = HashMap::new();
    for k in items {
        let g = *group_of.entry(k.group.clone()).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(k);
    }
    groups.shuffle(&mut rng);
    let total: usize = groups.iter().map(Vec::len).sum();
    let largest = groups.iter().map(Vec::len).max().unwrap_or(0);
    let sheets = total.div_ceil(sheet_items.max(1)).max(largest);
    // Dealt in turn: a group's items are consecutive in the deal and no more than the sheets,
    // so each lands on a sheet of its own; the sheets' sizes differ by at most one.
    let mut dealt: Vec<Vec<KeyItem>> = (0..sheets).map(|_| Vec::new()).collect();
    for (i, k) in groups.into_iter().flatten().enumerate() {
        dealt[i % sheets].push(k);
    }
    let mut key = Vec::with_capacity(total);
    for (s, mut rows) in dealt.into_iter().enumerate() {
        rows.shuffle(&mut rng);
        for (r, mut k) in rows.into_iter().enumerate() {
            k.sheet = format!("sheet-{:03}", s + 1);
            k.row = r + 1;
            key.push(k);
        }
    }
    key
}

fn width(items: &[&KeyItem]) -> usize {
    items.iter().map(|k| k.slots.len()).max().unwrap_or(0)
}

fn header(n: usize) -> Vec<String> {
    let mut h: Vec<String> = ["sheet", "row", "item", "context"]
        .map(String::from)
        .to_vec();
    for prefix in ["ending", "label", "rank"] {
        h.extend((1..=n).map(|i| format!("{prefix}_{i}")));
    }
    h.push("annotator".into());
    h
}

/// The context as a sheet shows it: the caption and the start of the next sentence, then "...".
pub(crate) fn shown_context(k: &KeyItem) -> String {
    af_core::question::join_text(&k.context, &format!("{} ...", k.prefix))
}

/// One sheet as CSV, label and rank columns empty.
pub fn sheet_csv(items: &[&KeyItem]) -> Result<Vec<u8>, csv::Error> {
    let n = width(items);
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(header(n))?;
    for k in items {
        let mut row = vec![
            k.sheet.clone(),
            k.row.to_string(),
            k.item.clone(),
            shown_context(k),
        ];
        row.extend((0..n).map(|i| k.slots.get(i).map_or(String::new(), |s| s.ending.clone())));
        row.extend(std::iter::repeat_n(String::new(), 2 * n + 1));
        w.write_record(&row)?;
    }
    w.into_inner().map_err(|e| e.into_error().into())
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// The same sheet as a form: an annotator marks each ending and picks best and second best, then
/// saves a CSV in the sheet's layout (the page's only script builds that file; nothing is sent
/// anywhere).
pub fn sheet_html(items: &[&KeyItem]) -> String {
    let n = width(items);
    let name = items.first().map_or("sheet", |k| k.sheet.as_str());
    let mut body = String::new();
    for k in items {
        body.push_str(&format!(
            "<fieldset data-sheet=\"{}\" data-row=\"{}\" data-item=\"{}\" data-context=\"{}\"><legend>{} &middot; {}</legend><p>{}</p><table><tr><th>ending</th><th>likely</th><th>unlikely</th><th>gibberish</th><th>best</th><th>second</th></tr>",
            escape(&k.sheet), k.row, escape(&k.item), escape(&shown_context(k)), k.row, escape(&k.item), escape(&shown_context(k))
        ));
        for (i, s) in k.slots.iter().enumerate() {
            let id = format!("r{}e{}", k.row, i + 1);
            body.push_str(&format!(
                "<tr data-ending=\"{}\"><td>{}</td>",
                escape(&s.ending),
                escape(&s.ending)
            ));
            for l in Label::ALL {
                body.push_str(&format!(
                    "<td><input type=\"radio\" name=\"{id}\" value=\"{}\"></td>",
                    l.name()
                ));
            }
            body.push_str(&format!(
                "<td><input type=\"radio\" name=\"r{}best\" value=\"{}\"></td><td><input type=\"radio\" name=\"r{}second\" value=\"{}\"></td></tr>",
                k.row, i + 1, k.row, i + 1
            ));
        }
        body.push_str("</table></fieldset>\n");
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{name}</title><style>{STYLE}</style></head><body>\n\
         <h1>Annotation {name}</h1><p>For each ending: is it a <b>likely</b> continuation, an <b>unlikely</b> one, or <b>gibberish</b>? Then pick the best and the second best ending. Save writes <code>{name}-filled.csv</code>; send that file back.</p>\n\
         <p><label>Your name: <input id=\"annotator\"></label> <button onclick=\"save()\">Save CSV</button> <span id=\"status\"></span></p>\n{body}\
         <script>const WIDTH={n};const SHEET=\"{name}\";{FORM_SAVE_SCRIPT}{SCRIPT}</script></body></html>\n"
    )
}

pub(crate) const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em}fieldset{margin:1em 0;border:1px solid #ccc;border-radius:6px}td,th{padding:.2em .5em;border-bottom:1px solid #eee}td:first-child{max-width:560px}";

/// What both forms' Save buttons share: quoting a CSV cell, and handing the file to the browser
/// (after asking about unfinished rows). Expects `SHEET` and a `#status` element.
pub(crate) const FORM_SAVE_SCRIPT: &str = r#"
function q(s){return '"'+String(s).replace(/"/g,'""')+'"';}
function download(lines,missing){
  if(missing.length&&!confirm('Rows '+missing.join(', ')+' are not finished. Save anyway?'))return;
  const a=document.createElement('a');
  a.href=URL.createObjectURL(new Blob([lines.join('\n')+'\n'],{type:'text/csv'}));
  a.download=SHEET+'-filled.csv';a.click();
  document.getElementById('status').textContent='saved '+a.download;
}
"#;

const SCRIPT: &str = r#"
function save(){
  const who=document.getElementById('annotator').value.trim();
  if(!who){alert('Please enter your name.');return;}
  const head=['sheet','row','item','context'];
  for(const p of ['ending','label','rank'])for(let i=1;i<=WIDTH;i++)head.push(p+'_'+i);
  head.push('annotator');
  const lines=[head.join(',')];const missing=[];
  for(const f of document.querySelectorAll('fieldset')){
    const row=f.dataset.row;const trs=f.querySelectorAll('tr[data-ending]');
    const endings=[],labels=[],ranks=[];
    const best=f.querySelector('input[name="r'+row+'best"]:checked');
    const second=f.querySelector('input[name="r'+row+'second"]:checked');
    trs.forEach((tr,i)=>{endings.push(tr.dataset.ending);
      const l=tr.querySelector('input[name="r'+row+'e'+(i+1)+'"]:checked');
      labels.push(l?l.value:'');
      ranks.push(best&&best.value==String(i+1)?'best':(second&&second.value==String(i+1)?'second':''));});
    if(labels.includes('')||!best||!second)missing.push(row);
    while(endings.length<WIDTH){endings.push('');labels.push('');ranks.push('');}
    lines.push([f.dataset.sheet,row,f.dataset.item,f.dataset.context].concat(endings,labels,ranks,[who]).map(q).join(','));
  }
  download(lines,missing);
}
"#;

/// Reads a filled sheet against the key. Returns the good rows and, with `skip_bad`, the bad ones
/// as errors (without it, the first bad row is the error). One annotator answering one item twice
/// is caught across files by [`reject_repeats`].
pub fn read_sheet(
    path: &Path,
    key: &HashMap<String, KeyItem>,
    skip_bad: bool,
) -> Result<(Vec<Annotation>, Vec<SheetError>), SheetError> {
    let default_annotator = path
        .file_stem()
        .map_or("annotator".into(), |s| s.to_string_lossy().into_owned());
    read_rows(
        path,
        &[
            "sheet",
            "row",
            "item",
            "annotator",
            "ending_1",
            "label_1",
            "rank_1",
        ],
        "an af annotation sheet",
        skip_bad,
        |get, line| {
            parse_row(get, key).map(|(item, labels, best, second)| Annotation {
                annotator: Some(get("annotator"))
                    .filter(|a| !a.is_empty())
                    .unwrap_or_else(|| default_annotator.clone()),
                item,
                labels,
                best,
                second,
                file: path.to_path_buf(),
                line,
            })
        },
    )
}

/// Reads a filled CSV sheet row by row, for the label sheets and the check's: the header must name
/// every column in `required` (else the error says it is not `kind`); `parse` turns a row (its
/// trimmed cells by column name, and its line) into a value or a message. Returns the good rows
/// and, with `skip_bad`, the bad ones as errors (without it, the first bad row is the error).
pub(crate) fn read_rows<T>(
    path: &Path,
    required: &[&str],
    kind: &str,
    skip_bad: bool,
    mut parse: impl FnMut(&dyn Fn(&str) -> String, usize) -> Result<T, String>,
) -> Result<(Vec<T>, Vec<SheetError>), SheetError> {
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
    if let Some(missing) = required.iter().find(|c| col(c).is_none()) {
        return Err(file_error(format!(
            "no column `{missing}`: is this {kind}?"
        )));
    }
    let (mut good, mut bad) = (Vec::new(), Vec::new());
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
        match parse(&get, line) {
            Ok(row) => good.push(row),
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

/// Rejects a second answer by one person to one question across every file read (votes are
/// counted per answer, so a sheet given twice, or two people under one name, would count twice).
/// `id` gives (who, what was answered); `place` the row's file and line. The later row is the
/// error, naming the first; with `skip_bad` it is left out and listed instead.
pub fn reject_repeats<T>(
    rows: Vec<T>,
    skip_bad: bool,
    id: impl Fn(&T) -> (String, String),
    place: impl Fn(&T) -> (PathBuf, usize),
) -> Result<(Vec<T>, Vec<SheetError>), SheetError> {
    let mut first: HashMap<(String, String), (PathBuf, usize)> = HashMap::new();
    let (mut kept, mut bad) = (Vec::new(), Vec::new());
    for row in rows {
        let (who, what) = id(&row);
        let (path, line) = place(&row);
        match first.get(&(who.clone(), what.clone())) {
            Some((p, l)) => {
                let e = SheetError::Row {
                    path,
                    line,
                    message: format!(
                        "`{who}` already answered {what} at {}:{l}: give each filled sheet once, and each person's name in its column",
                        p.display()
                    ),
                };
                if !skip_bad {
                    return Err(e);
                }
                bad.push(e);
            }
            None => {
                first.insert((who, what), (path, line));
                kept.push(row);
            }
        }
    }
    Ok((kept, bad))
}

type ParsedRow = (String, Vec<Label>, usize, usize);

fn parse_row(
    get: &dyn Fn(&str) -> String,
    key: &HashMap<String, KeyItem>,
) -> Result<ParsedRow, String> {
    let item = get("item");
    let k = key
        .get(&item)
        .ok_or_else(|| format!("item `{item}` is not in the key"))?;
    let (sheet, row) = (get("sheet"), get("row"));
    if sheet != k.sheet || row != k.row.to_string() {
        return Err(format!(
            "item `{item}` is row {} of {} in the key, but this row says row {row:?} of {sheet:?}: rows were moved or edited",
            k.row, k.sheet
        ));
    }
    let mut labels = Vec::with_capacity(k.slots.len());
    let (mut best, mut second) = (Vec::new(), Vec::new());
    for (i, slot) in k.slots.iter().enumerate() {
        let n = i + 1;
        if get(&format!("ending_{n}")) != slot.ending.trim() {
            return Err(format!(
                "ending_{n} of item `{item}` differs from the sheet as exported"
            ));
        }
        let label = get(&format!("label_{n}")).to_lowercase();
        labels.push(
            Label::ALL
                .into_iter()
                .find(|l| l.name() == label)
                .ok_or_else(|| {
                    format!("label_{n} is {label:?}, expected likely, unlikely or gibberish")
                })?,
        );
        match get(&format!("rank_{n}")).to_lowercase().as_str() {
            "" => {}
            "best" => best.push(i),
            "second" => second.push(i),
            other => {
                return Err(format!(
                    "rank_{n} is {other:?}, expected best, second or nothing"
                ))
            }
        }
    }
    let endings = |v: &[usize]| {
        v.iter()
            .map(|i| (i + 1).to_string())
            .collect::<Vec<_>>()
            .join(" and ")
    };
    match (best.as_slice(), second.as_slice()) {
        ([b], [s]) => Ok((item, labels, *b, *s)),
        ([], _) => Err("no ending is ranked best".into()),
        (b, _) if b.len() > 1 => Err(format!(
            "two endings are ranked best (endings {})",
            endings(b)
        )),
        (_, []) => Err("no ending is ranked second".into()),
        (_, s) => Err(format!(
            "two endings are ranked second (endings {})",
            endings(s)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn question(group: usize, n: usize) -> (af_core::Question, Vec<u32>) {
        let q = af_core::Question {
            id: format!("v{group}-{n}"),
            group: format!("v{group}"),
            context: format!("context {group} {n}"),
            prefix: "He".into(),
            endings: (0..4).map(|e| format!("ending {e}")).collect(),
            label: 0,
            split: None,
            blank: None,
            line: 1,
        };
        (q, vec![3, 5, 7])
    }

    #[test]
    fn no_sheet_holds_two_items_of_one_group_and_sheets_are_even() {
        // 27 videos of 1 to 6 items: 90 items, at most 10 a sheet, so 9 sheets of 10.
        let items: Vec<_> = (0..27)
            .flat_map(|g| (0..1 + (g * 7) % 6).map(move |n| question(g, n)))
            .collect();
        assert_eq!(items.len(), 90);
        let key = build_key(&items, 2, 10, 13);
        let mut sheets: BTreeMap<&str, Vec<&KeyItem>> = BTreeMap::new();
        for k in &key {
            sheets.entry(k.sheet.as_str()).or_default().push(k);
        }
        assert_eq!(sheets.len(), 9);
        for (name, rows) in &sheets {
            assert_eq!(rows.len(), 10, "{name}");
            let groups: BTreeSet<&str> = rows.iter().map(|k| k.group.as_str()).collect();
            assert_eq!(groups.len(), rows.len(), "{name}: a group twice");
            let numbers: Vec<usize> = rows.iter().map(|k| k.row).collect();
            assert_eq!(
                numbers,
                (1..=10).collect::<Vec<_>>(),
                "{name}: rows in key order"
            );
        }
        let ids: BTreeSet<&str> = key.iter().map(|k| k.item.as_str()).collect();
        assert_eq!(ids.len(), 90, "every item once");
        // Not in input order (the order gave pairs away), and the same for the same seed.
        let input: Vec<&str> = items.iter().map(|(q, _)| q.id.as_str()).collect();
        let laid_out: Vec<&str> = key.iter().map(|k| k.item.as_str()).collect();
        assert_ne!(laid_out, input);
        assert_eq!(build_key(&items, 2, 10, 13), key);
        assert_ne!(build_key(&items, 2, 10, 14), key);
    }

    #[test]
    fn a_group_larger_than_the_sheets_needed_opens_more_sheets() {
        let items: Vec<_> = (0..7)
            .map(|n| question(0, n))
            .chain((1..4).map(|g| question(g, 0)))
            .collect();
        let key = build_key(&items, 1, 100, 1);
        let sheets: BTreeSet<&str> = key.iter().map(|k| k.sheet.as_str()).collect();
        assert_eq!(sheets.len(), 7, "one sheet per item of the video with 7");
        for s in &sheets {
            let groups: Vec<&str> = key
                .iter()
                .filter(|k| k.sheet == *s)
                .map(|k| k.group.as_str())
                .collect();
            let distinct: BTreeSet<&&str> = groups.iter().collect();
            assert_eq!(distinct.len(), groups.len());
        }
    }
}
