//! What a mutation fuzzer found in the readers (issue 17, items 2, 5, 6 and 9): each case is an
//! input a reader used to accept silently or describe in Rust debug output.

use std::path::{Path, PathBuf};

use af_core::config::{InputFormat, InputSpec};
use af_io::documents::read_input;
use af_io::features::{npy_bytes, read_features, read_instances, InstanceFields};
use af_io::questions::{read_questions, QuestionFormat};

fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

fn err<T: std::fmt::Debug, E: std::fmt::Display>(r: Result<T, E>) -> String {
    r.unwrap_err().to_string()
}

fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    npy_bytes(
        &format!("{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, }}"),
        data,
    )
}

fn le32(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn le64(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

fn spec(path: &Path, format: InputFormat) -> InputSpec {
    InputSpec::new(path, format)
}

fn fields(id: &str, label: &str) -> InstanceFields {
    InstanceFields {
        id: id.into(),
        label: label.into(),
        group: None,
        twins_from_id: false,
    }
}

// Item 2: a NaN or an infinity turns every prediction of `af aflite` into nonsense, silently.

#[test]
fn csv_features_refuse_nan_and_infinities() {
    let d = tempfile::tempdir().unwrap();
    // Issue 44: a finite number beyond float32's range is called what it is, the number shown
    // as the file wrote it, at its line and column.
    for (bad, what) in [
        ("nan", "nan is not finite"),
        ("NaN", "NaN is not finite"),
        ("inf", "inf is not finite"),
        ("-inf", "-inf is not finite"),
        ("infinity", "infinity is not finite"),
        (
            "1e400",
            "1e400 is out of float32 range (at most 3.4028235e38)",
        ),
        (
            "1e39",
            "1e39 is out of float32 range (at most 3.4028235e38)",
        ),
    ] {
        let p = write(d.path(), "f.csv", format!("a,b\n1,2\n3,{bad}\n").as_bytes());
        assert_eq!(
            err(read_features(&p)),
            format!("{}:3:3: column 2: {what}", p.display()),
            "{bad}"
        );
    }
    // A first line of NaNs is data, not a header.
    let p = write(d.path(), "g.csv", b"nan,1\n2,3\n");
    assert_eq!(
        err(read_features(&p)),
        format!("{}:1:1: column 1: nan is not finite", p.display())
    );
    let p = write(d.path(), "h.csv", b"1,2\n3, x\n");
    assert_eq!(
        err(read_features(&p)),
        format!("{}:2:3: column 2: \" x\" is not a number", p.display())
    );
}

#[test]
fn npy_features_refuse_nan_and_infinities() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("f.npy");
    std::fs::write(
        &p,
        npy("'<f4'", "(2, 2)", &le32(&[1.0, 2.0, f32::NAN, 4.0])),
    )
    .unwrap();
    assert_eq!(
        err(read_features(&p)),
        format!(
            "{}: row 1, column 0 (counting from 0): NaN is not finite",
            p.display()
        )
    );
    std::fs::write(
        &p,
        npy(
            "'<f4'",
            "(2, 2)",
            &le32(&[1.0, f32::NEG_INFINITY, 3.0, 4.0]),
        ),
    )
    .unwrap();
    assert_eq!(
        err(read_features(&p)),
        format!(
            "{}: row 0, column 1 (counting from 0): -inf is not finite",
            p.display()
        )
    );
    std::fs::write(
        &p,
        npy("'<f8'", "(2, 2)", &le64(&[1.0, 2.0, 3.0, f64::INFINITY])),
    )
    .unwrap();
    assert_eq!(
        err(read_features(&p)),
        format!(
            "{}: row 1, column 1 (counting from 0): inf is not finite",
            p.display()
        )
    );
    std::fs::write(
        &p,
        npy("'<f8'", "(2, 2)", &le64(&[1.0, f64::NAN, 3.0, 4.0])),
    )
    .unwrap();
    assert!(
        err(read_features(&p)).ends_with("row 0, column 1 (counting from 0): NaN is not finite")
    );
    // Finite as float64, infinite as the float32 af computes in.
    std::fs::write(&p, npy("'<f8'", "(2, 2)", &le64(&[1.0, 2.0, 1e300, 4.0]))).unwrap();
    assert_eq!(
        err(read_features(&p)),
        format!(
            "{}: row 1, column 0 (counting from 0): 1e300 is out of float32 range (at most 3.4028235e38)",
            p.display()
        )
    );
}

#[test]
fn safetensors_features_refuse_nan_and_infinities() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("f.safetensors");
    let h = r#"{"feats":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#;
    std::fs::write(&p, safetensors(h, &le32(&[1.0, 2.0, 3.0, f32::NAN]))).unwrap();
    assert_eq!(
        err(read_features(&p)),
        format!(
            "{}: tensor `feats`: row 1, column 1 (counting from 0): NaN is not finite",
            p.display()
        )
    );
    let h = r#"{"feats":{"dtype":"F64","shape":[2,2],"data_offsets":[0,32]}}"#;
    std::fs::write(&p, safetensors(h, &le64(&[f64::INFINITY, 2.0, 3.0, 4.0]))).unwrap();
    assert_eq!(
        err(read_features(&p)),
        format!(
            "{}: tensor `feats`: row 0, column 0 (counting from 0): inf is not finite",
            p.display()
        )
    );
}

// Item 5: duplicate columns, keys and ids are errors, and labels are integers or strings.

#[test]
fn csv_headers_refuse_duplicate_columns() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "a.csv", b"video,caption,caption\nv,One.,Two.\n");
    let mut s = spec(&p, InputFormat::Csv);
    s.group_field = Some("video".into());
    s.text_field = Some("caption".into());
    assert_eq!(
        err(read_input(&s)),
        format!(
            "{}:1: duplicate column `caption` (columns 2 and 3)",
            p.display()
        )
    );

    let p = write(
        d.path(),
        "s.csv",
        b",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending1,ending3,label\n0,v,1,s,a,b,gold,e,f,g,h,0\n",
    );
    assert_eq!(
        err(read_questions(&p, None, false)),
        format!(
            "{}:1: duplicate column `ending1` (columns 9 and 10)",
            p.display()
        )
    );
    assert_eq!(
        err(read_questions(&p, None, true)),
        format!(
            "{}:1: duplicate column `ending1` (columns 9 and 10)",
            p.display()
        ),
        "not a bad row"
    );

    let p = write(d.path(), "f.csv", b"x,y,x\n1,2,3\n");
    assert_eq!(
        err(read_features(&p)),
        format!("{}:1: duplicate column `x` (columns 1 and 3)", p.display())
    );
}

#[test]
fn json_objects_refuse_duplicate_keys() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "i.jsonl",
        b"{\"id\": \"i0\", \"label\": 0}\n{\"label\": 1, \"id\": \"i1\", \"label\": 0}\n",
    );
    assert_eq!(
        err(read_instances(&p, &fields("id", "label"))),
        format!("{}:2:32: duplicate key `label`", p.display())
    );

    let p = write(
        d.path(),
        "d.jsonl",
        b"{\"g\": \"v\", \"t\": \"One.\"}\n\n{\"g\": \"v\", \"t\": \"Two.\", \"t\": \"Three.\"}\n",
    );
    let mut s = spec(&p, InputFormat::Jsonl);
    s.group_field = Some("g".into());
    s.text_field = Some("t".into());
    assert_eq!(
        err(read_input(&s)),
        format!("{}:3:27: duplicate key `t`", p.display())
    );

    // Nested objects too (af's own layout), and a bad row under `skip_bad` is listed.
    let ok = r#"{"id": "v-0", "group": "v", "context": "c.", "noun_phrase": "He", "gold": {"ending": "g"}, "distractors": [{"ending": "x"}]}"#;
    let dup = r#"{"id": "v-1", "group": "v", "context": "c.", "noun_phrase": "He", "gold": {"ending": "g"}, "distractors": [{"ending": "x", "ending": "y"}]}"#;
    let p = write(d.path(), "a.jsonl", format!("{ok}\n{dup}\n").as_bytes());
    assert_eq!(
        err(read_questions(&p, None, false)),
        format!("{}:2:131: duplicate key `ending`", p.display())
    );
    let f = read_questions(&p, None, true).unwrap();
    assert_eq!(
        (
            f.questions.len(),
            f.skipped[0].line,
            f.skipped[0].reason.as_str()
        ),
        (1, 2, "duplicate key `ending`")
    );

    // ActivityNet keeps its own wording for a repeated video, through the same check.
    let p = write(
        d.path(),
        "an.json",
        b"{\"v\": {\"sentences\": [\"x\"]},\n \"v\": {\"sentences\": [\"y\"]}}",
    );
    assert_eq!(
        err(read_input(&spec(&p, InputFormat::Activitynet))),
        format!("{}:2:4: duplicate video id `v`", p.display())
    );
    let p = write(
        d.path(),
        "an2.json",
        b"{\"v\": {\"sentences\": [\"x\"],\n \"sentences\": [\"y\"]}}",
    );
    assert_eq!(
        err(read_input(&spec(&p, InputFormat::Activitynet))),
        format!("{}:2:12: duplicate key `sentences`", p.display())
    );

    // The walk is bounded by serde_json's nesting limit, as parsing was.
    let p = write(
        d.path(),
        "deep.jsonl",
        format!("{}\n", "[".repeat(100_000)).as_bytes(),
    );
    assert!(err(read_instances(&p, &fields("id", "label"))).contains("recursion limit exceeded"));

    // The items file's own struct already refused a repeated field; it still does.
    let p = write(d.path(), "items.jsonl", br#"{"id": "a", "id": "b"}"#);
    assert!(err(af_io::items::read_items(&p)).contains("duplicate field `id`"));
}

#[test]
fn a_repeated_question_id_is_an_error_naming_the_second() {
    let d = tempfile::tempdir().unwrap();
    let wg = |id: &str| {
        format!(
            r#"{{"qID": "{id}", "sentence": "x _ y", "option1": "a", "option2": "b", "answer": "1"}}"#
        )
    };
    let p = write(
        d.path(),
        "w.jsonl",
        format!("{}\n{}\n{}\n", wg("A-1"), wg("A-2"), wg("A-1")).as_bytes(),
    );
    assert_eq!(
        err(read_questions(&p, None, false)),
        format!("{}:3: duplicate id `A-1` (first on line 1)", p.display())
    );
    let f = read_questions(&p, None, true).unwrap();
    assert_eq!(
        f.questions.len(),
        2,
        "twins `A-1` and `A-2` are two questions of one group"
    );
    assert_eq!(
        (f.skipped[0].line, f.skipped[0].reason.as_str()),
        (3, "duplicate id `A-1` (first on line 1)")
    );

    let p = write(d.path(), "g.jsonl", b"{\"id\": 7, \"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 0}\n{\"id\": \"7\", \"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 1}\n");
    assert_eq!(
        err(read_questions(&p, None, false)),
        format!("{}:2: duplicate id `7` (first on line 1)", p.display())
    );

    let p = write(
        d.path(),
        "s.csv",
        b",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n0,v,1,s,a,b,gold,e,f,g,h,0\n0,w,2,s,a,b,gold,e,f,g,h,1\n",
    );
    assert_eq!(
        err(read_questions(&p, Some(QuestionFormat::SWAG), false)),
        format!("{}:3: duplicate id `0` (first on line 2)", p.display())
    );
}

#[test]
fn instance_labels_are_integers_or_strings() {
    let d = tempfile::tempdir().unwrap();
    // Issue 44: the value and where it starts, a number shown as one.
    for (label, found) in [
        ("1.5", "the number 1.5"),
        ("1.0", "the number 1.0"),
        ("true", "a boolean (true)"),
        ("null", "null"),
        ("[1]", "a list"),
        ("{\"a\": 1}", "an object"),
    ] {
        let p = write(
            d.path(),
            "i.jsonl",
            format!("{{\"id\": \"a\", \"label\": 0}}\n{{\"id\": \"b\", \"label\": {label}}}\n")
                .as_bytes(),
        );
        assert_eq!(
            err(read_instances(&p, &fields("id", "label"))),
            format!(
                "{}:2:22: field `label` is {found}, expected an integer or a string",
                p.display()
            ),
            "{label}"
        );
    }
    let p = write(d.path(), "ok.jsonl", b"{\"id\": \"a\", \"label\": -2}\n{\"id\": \"b\", \"label\": \"yes\"}\n{\"id\": \"c\", \"label\": 18446744073709551615}\n");
    let labels: Vec<String> = read_instances(&p, &fields("id", "label"))
        .unwrap()
        .into_iter()
        .map(|i| i.label)
        .collect();
    assert_eq!(labels, ["-2", "yes", "18446744073709551615"]);
    let p = write(d.path(), "none.jsonl", b"{\"id\": \"a\"}\n");
    assert_eq!(
        err(read_instances(&p, &fields("id", "label"))),
        format!("{}:1: no field `label`", p.display())
    );
}

// Item 6: a UTF-8 byte-order mark is skipped wherever af-io reads text.

#[test]
fn a_byte_order_mark_is_skipped() {
    let d = tempfile::tempdir().unwrap();
    let bom = |s: &str| [b"\xef\xbb\xbf".as_slice(), s.as_bytes()].concat();

    let p = write(
        d.path(),
        "a.json",
        &bom(r#"{"v": {"sentences": ["One.", "Two."]}}"#),
    );
    assert_eq!(
        read_input(&spec(&p, InputFormat::Activitynet)).unwrap()[0].sentences,
        ["One.", "Two."]
    );

    let p = write(
        d.path(),
        "a.jsonl",
        &bom("{\"g\": \"v\", \"t\": \"One.\"}\n"),
    );
    let mut s = spec(&p, InputFormat::Jsonl);
    s.group_field = Some("g".into());
    s.text_field = Some("t".into());
    assert_eq!(read_input(&s).unwrap()[0].sentences, ["One."]);

    let p = write(d.path(), "a.txt", &bom("He ran. She sat."));
    assert_eq!(
        read_input(&spec(&p, InputFormat::Text)).unwrap()[0].sentences,
        ["He ran.", "She sat."]
    );

    let p = write(
        d.path(),
        "g.jsonl",
        &bom(r#"{"context": "c", "endings": ["a", "b"], "label": 1}"#),
    );
    let f = read_questions(&p, None, false).unwrap();
    assert_eq!(
        (f.format, f.questions[0].label),
        (QuestionFormat::GENERIC, 1),
        "the layout is detected through the mark"
    );

    let p = write(d.path(), "i.jsonl", &bom("{\"id\": \"a\", \"label\": 1}\n"));
    assert_eq!(
        read_instances(&p, &fields("id", "label")).unwrap()[0].label,
        "1"
    );

    let item = r#"{"id":"v-0","group":"v","fold":0,"context":"c.","noun_phrase":"He","ending":"runs.","context_tokens":2,"noun_phrase_tokens":1,"ending_tokens":2}"#;
    let p = write(d.path(), "items.jsonl", &bom(item));
    assert_eq!(af_io::items::read_items(&p).unwrap()[0].id, "v-0");

    // Without the fix the first row was taken for a header and dropped.
    let p = write(d.path(), "f.csv", &bom("1,2\n3,4\n"));
    assert_eq!(read_features(&p).unwrap().rows, 2);

    let p = write(
        d.path(),
        "t.conllu",
        &bom("1\tHe\the\tPRON\tPRP\t_\t2\tnsubj\t_\t_\n2\tran\trun\tVERB\tVBD\t_\t0\troot\t_\t_\n"),
    );
    assert_eq!(
        af_io::conllu::read_conllu(&p).unwrap()[0].words,
        ["He", "ran"]
    );
}

// Item 9: `.npy` errors in words, not Rust debug output.

#[test]
fn npy_errors_say_what_was_found_and_what_af_reads() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("f.npy");
    let expect = |content: Vec<u8>, message: &str| {
        std::fs::write(&p, content).unwrap();
        let e = err(read_features(&p));
        assert_eq!(e, format!("{}: {message}", p.display()));
        assert!(!e.contains("Some(") && !e.contains("None"), "{e}");
    };
    let tail = "af reads float32 (`<f4`) or float64 (`<f8`)";
    expect(
        npy("'<f2'", "(1, 1)", &[0, 0]),
        &format!("dtype `<f2` (float16): {tail}"),
    );
    expect(
        npy("'>f4'", "(1, 1)", &[0; 4]),
        &format!("dtype `>f4` (big-endian float32): {tail}"),
    );
    expect(
        npy("'<i8'", "(1, 1)", &[0; 8]),
        &format!("dtype `<i8` (int64): {tail}"),
    );
    expect(
        npy("'|u1'", "(1, 1)", &[0]),
        &format!("dtype `|u1` (uint8): {tail}"),
    );
    expect(
        npy("'|b1'", "(1, 1)", &[0]),
        &format!("dtype `|b1` (bool): {tail}"),
    );
    expect(
        npy("'<U3'", "(1, 1)", &[0; 12]),
        &format!("dtype `<U3` (text): {tail}"),
    );
    expect(
        npy("'|O'", "(1, 1)", &[0; 8]),
        &format!("dtype `|O` (Python objects): {tail}"),
    );
    expect(
        npy("[('a', '<f4'), ('b', '<f4')]", "(1,)", &[0; 8]),
        &format!("a structured dtype (named fields): {tail}"),
    );

    expect(
        npy_bytes("{'fortran_order': False, 'shape': (1, 1), }", &[0; 4]),
        "no dtype (`descr`) in the header",
    );
    expect(
        npy_bytes(
            "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1), }",
            &[0; 4],
        ),
        "Fortran-ordered array: save it with np.ascontiguousarray first",
    );
    expect(
        npy_bytes("{'descr': '<f4', 'shape': (1, 1), }", &[0; 4]),
        "no fortran_order in the header",
    );
    // A writer that leaves out the trailing comma is read too.
    std::fs::write(
        &p,
        npy_bytes(
            "{'descr': '<f4', 'shape': (1, 1), 'fortran_order': False}",
            &[0; 4],
        ),
    )
    .unwrap();
    assert_eq!(read_features(&p).unwrap().data, [0.0]);
    expect(
        npy("'<f4'", "(3,)", &[0; 12]),
        "shape (3,) has 1 dimension: af reads a 2-D matrix (instances, features)",
    );
    expect(
        npy("'<f4'", "(2, 2)", &[0; 12]),
        "12 bytes of data: shape (2, 2) of float32 needs 16",
    );
    expect(
        npy("'<f4'", "(4294967296, 4294967296)", &[0; 4]),
        "shape (4294967296, 4294967296) is too large",
    );
    let mut v4 = npy("'<f4'", "(1, 1)", &[0; 4]);
    v4[6] = 4;
    expect(v4, "format version 4: af reads versions 1, 2 and 3");
    expect(b"\x93NUMPY\x02\x00\x10\x00".to_vec(), "truncated header");
}

#[test]
fn feature_file_errors_have_no_debug_output() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "f.txt", b"1,2\n");
    assert_eq!(
        err(read_features(&p)),
        format!(
            "{}: unknown feature file type `.txt`: af reads .npy, .safetensors or .csv",
            p.display()
        )
    );
    let p = write(d.path(), "features", b"1,2\n");
    assert_eq!(
        err(read_features(&p)),
        format!(
            "{}: no file extension: af reads .npy, .safetensors or .csv",
            p.display()
        )
    );
    let p = d.path().join("f.safetensors");
    std::fs::write(
        &p,
        safetensors(
            r#"{"x":{"dtype":"F16","shape":[1,1],"data_offsets":[0,2]}}"#,
            &[0, 0],
        ),
    )
    .unwrap();
    assert_eq!(
        err(read_features(&p)),
        format!(
            "{}: tensor `x` has dtype F16: af reads F32 or F64",
            p.display()
        )
    );
    std::fs::write(
        &p,
        safetensors(r#"{"x":{"shape":[1,1],"data_offsets":[0,4]}}"#, &[0; 4]),
    )
    .unwrap();
    assert_eq!(
        err(read_features(&p)),
        format!(
            "{}: tensor `x` has no dtype: af reads F32 or F64",
            p.display()
        )
    );
    // Two tensors of one name would otherwise read as one.
    let h = r#"{"x":{"dtype":"F32","shape":[1,1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1,1],"data_offsets":[4,8]}}"#;
    std::fs::write(&p, safetensors(h, &[0; 8])).unwrap();
    assert_eq!(
        err(read_features(&p)),
        format!("{}: header: duplicate key `x`", p.display())
    );
    // A header length near u64::MAX is an error, not an overflow.
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend(b"{}");
    std::fs::write(&p, huge).unwrap();
    assert_eq!(
        err(read_features(&p)),
        format!("{}: truncated header", p.display())
    );
}

// Issue 44: what readers still accepted silently, and one error format.

/// The same malformed line gives the same `file:line:column: malformed JSON: ...` in `af pairs`',
/// `af audit`'s and `af aflite`'s readers (the audit said `file:1: malformed JSON at column 12`).
#[test]
fn malformed_json_has_one_format_in_every_reader() {
    let d = tempfile::tempdir().unwrap();
    let line = b"{\"id\": \"a\", x}\n";
    let p = write(d.path(), "q.jsonl", line);
    let mut s = spec(&p, InputFormat::Jsonl);
    s.group_field = Some("id".into());
    s.text_field = Some("t".into());
    let want = format!("{}:1:13: malformed JSON: key must be a string", p.display());
    assert_eq!(err(read_input(&s)), want);
    assert_eq!(err(read_instances(&p, &fields("id", "label"))), want);
    assert_eq!(
        err(read_questions(&p, Some(QuestionFormat::GENERIC), false)),
        want
    );
    let skipped = &read_questions(
        &write(
            d.path(),
            "g.jsonl",
            b"{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 0}\n{\"id\": \"a\", x}\n",
        ),
        None,
        true,
    )
    .unwrap()
    .skipped[0];
    assert_eq!(
        skipped.describe(Path::new("g.jsonl")),
        "g.jsonl:2:13: malformed JSON: key must be a string"
    );
    // A type error is not malformed JSON.
    let p = write(d.path(), "a.json", b"{\"v\": {\"sentences\": [\"x\", 7]}}");
    let e = err(read_input(&spec(&p, InputFormat::Activitynet)));
    assert!(
        e.starts_with(&format!("{}:1:", p.display())) && !e.contains("malformed"),
        "{e}"
    );
}

#[test]
fn numbers_where_text_belongs_and_empty_groups_are_refused() {
    let d = tempfile::tempdir().unwrap();
    // A WinoGrande option of 1e-400 was the option text "0.0".
    let p = write(
        d.path(),
        "w.jsonl",
        br#"{"qID": "A-1", "sentence": "x _ y", "option1": "a", "option2": 1e-400, "answer": "1"}"#,
    );
    assert_eq!(
        err(read_questions(&p, None, false)),
        format!(
            "{}:1:64: field `option2` is the number 1e-400, expected text (a JSON string)",
            p.display()
        )
    );
    // A pairs-jsonl group of 1e-400 was group "0.0"; an integer group is still a group.
    let p = write(
        d.path(),
        "p.jsonl",
        b"{\"video\": 7, \"t\": \"One.\"}\n{\"video\": 1e-400, \"t\": \"Two.\"}\n",
    );
    let mut s = spec(&p, InputFormat::Jsonl);
    s.group_field = Some("video".into());
    s.text_field = Some("t".into());
    assert_eq!(
        err(read_input(&s)),
        format!(
            "{}:2:11: field `video` is the number 1e-400, expected text or an integer",
            p.display()
        )
    );
    let p = write(d.path(), "n.jsonl", b"{\"video\": \"v\", \"t\": 12}\n");
    s.path = p.clone();
    assert_eq!(
        err(read_input(&s)),
        format!(
            "{}:1:21: field `t` is the number 12, expected text (a JSON string)",
            p.display()
        )
    );
    // An empty CSV group cell was group "" for every such row.
    let p = write(d.path(), "c.csv", b"video,caption\nv1,One.\n ,Two.\n");
    let mut c = spec(&p, InputFormat::Csv);
    c.group_field = Some("video".into());
    c.text_field = Some("caption".into());
    assert_eq!(
        err(read_input(&c)),
        format!("{}:3:1: field `video` is empty", p.display())
    );
    let p = write(
        d.path(),
        "h.jsonl",
        br#"{"ind": 4, "ctx_a": "A.", "ctx_b": "b", "label": 1, "endings": ["a", "b"], "source_id": ""}"#,
    );
    assert_eq!(
        err(read_questions(&p, None, false)),
        format!("{}:1:89: field `source_id` is empty", p.display())
    );
    // An aflite label "" was a class of its own; a repeated id was scored twice.
    let p = write(
        d.path(),
        "i.jsonl",
        b"{\"id\": \"a\", \"label\": 0}\n{\"id\": \"b\", \"label\": \"\"}\n",
    );
    assert_eq!(
        err(read_instances(&p, &fields("id", "label"))),
        format!("{}:2:22: field `label` is empty", p.display())
    );
    let p = write(
        d.path(),
        "j.jsonl",
        b"{\"id\": \"a\", \"label\": 0}\n{\"id\": \"b\", \"label\": 1}\n{\"id\": \"a\", \"label\": 1}\n",
    );
    assert_eq!(
        err(read_instances(&p, &fields("id", "label"))),
        format!("{}:3:8: duplicate id `a` (first on line 1)", p.display())
    );
    // A label is shown as the file wrote it: a number bare, text quoted.
    let g = |label: &str| {
        format!("{{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": {label}}}\n")
    };
    let p = write(d.path(), "g.jsonl", g("9").as_bytes());
    assert!(
        err(read_questions(&p, None, false)).ends_with(":1:50: field `label` is 9, expected 0..=1")
    );
    let p = write(d.path(), "g.jsonl", g("\"9\"").as_bytes());
    assert!(err(read_questions(&p, None, false))
        .ends_with(":1:50: field `label` is \"9\", expected 0..=1"));
}

/// A lone carriage return ends a line for every line-based reader: `af aflite`'s features and
/// instances said "no rows of numbers" where `af pairs` read the same endings.
#[test]
fn cr_only_line_endings_are_read_by_every_line_reader() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "f.csv", b"a,b\r1,2\r3,4\r");
    assert_eq!(read_features(&p).unwrap().data, [1.0, 2.0, 3.0, 4.0]);
    let p = write(
        d.path(),
        "i.jsonl",
        b"{\"id\": \"a\", \"label\": 0}\r{\"id\": \"b\", \"label\": 1}\r",
    );
    assert_eq!(read_instances(&p, &fields("id", "label")).unwrap().len(), 2);
    let p = write(
        d.path(),
        "g.jsonl",
        b"{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 0}\r{\"context\": \"d\", \"endings\": [\"a\", \"b\"], \"label\": 9}\r",
    );
    assert!(
        err(read_questions(&p, None, false)).contains("g.jsonl:2:"),
        "the line count follows the lone CRs"
    );
    let p = write(
        d.path(),
        "d.jsonl",
        b"{\"g\": \"v\", \"t\": \"One.\"}\r{\"g\": \"v\", \"t\": \"Two.\"}",
    );
    let mut s = spec(&p, InputFormat::Jsonl);
    s.group_field = Some("g".into());
    s.text_field = Some("t".into());
    assert_eq!(read_input(&s).unwrap()[0].sentences, ["One.", "Two."]);
    let p = write(
        d.path(),
        "t.conllu",
        b"1\tHe\the\tPRON\tPRP\t_\t2\tnsubj\t_\t_\r2\tran\trun\tVERB\tVBD\t_\t0\troot\t_\t_\r",
    );
    assert_eq!(
        af_io::conllu::read_conllu(&p).unwrap()[0].words,
        ["He", "ran"]
    );
    // Invalid UTF-8 after lone CRs is placed on its line.
    let p = write(d.path(), "u.txt", b"One.\rTwo caf\xe9.");
    assert_eq!(
        err(read_input(&spec(&p, InputFormat::Text))),
        format!("{}:2:8: invalid UTF-8 at byte offset 12", p.display())
    );
}

/// A first line that fits no layout says, for each layout, what it lacks.
#[test]
fn an_undetectable_first_line_says_what_each_layout_lacks() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "w.jsonl",
        b"\n{\"qID\": \"A-1\", \"sentence\": \"x _ y\", \"option\": \"a\", \"option2\": \"b\", \"answer\": \"1\"}\n",
    );
    assert_eq!(
        err(read_questions(&p, None, false)),
        format!(
            "{}:2:1: cannot tell the layout from line 2: as hellaswag it lacks `ind`, `ctx_a`, `ctx_b`, `endings`, `label`; as winogrande it lacks `option1`; as af it lacks `id`, `group`, `context`, `noun_phrase`, `gold`, `distractors`; as generic it lacks `context`, `endings`, `label`; name it with --format ({})",
            p.display(),
            QuestionFormat::names()
        )
    );
    let p = write(
        d.path(),
        "s.csv",
        b",video-id,sent1,sent2,ending_0,label\n0,v,a,b,c,0\n",
    );
    let e = err(read_questions(&p, None, false));
    assert!(
        e.starts_with(&format!("{}:1:1: cannot tell the layout from line 1: as swag it lacks column `ending0`, `ending1`; as swag-full it lacks column `fold-ind`, `gold-ending`, `distractor-0`; as a JSON layout it is not a JSON object", p.display())),
        "{e}"
    );
    let p = write(
        d.path(),
        "deep.jsonl",
        format!("{}\n", "{\"a\":".repeat(200)).as_bytes(),
    );
    let e = err(read_questions(&p, None, false));
    assert!(
        e.contains("deep.jsonl:1:") && e.contains("malformed JSON: recursion limit exceeded"),
        "{e}"
    );
}
