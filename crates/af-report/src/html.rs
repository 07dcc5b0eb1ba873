//! The HTML report: one page, styles and pictures inline, no script, no external reference.

use std::fmt::Write as _;

/// Escapes text for HTML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A question as a reader sees it.
#[derive(Clone, Debug)]
pub struct Question {
    pub id: String,
    pub context: String,
    /// The noun phrase that starts every option.
    pub noun_phrase: String,
    pub options: Vec<String>,
    /// Which option is right.
    pub answer: usize,
}

/// One part of the page: a heading, then trusted HTML (tables, inline SVG) the caller built.
#[derive(Clone, Debug)]
pub struct Section {
    pub title: String,
    pub html: String,
}

pub struct Page {
    pub title: String,
    pub subtitle: String,
    pub sections: Vec<Section>,
    pub questions: Vec<Question>,
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}\
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}\
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.sub{color:#666}\
.q{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;margin:.8em 0}.q ol{margin:.3em 0}\
.right{font-weight:600;color:#176117}.right::after{content:' \\2714 right'}svg{max-width:100%;height:auto}";

impl Page {
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1><p class=\"sub\">{}</p>\n",
            escape(&self.title),
            escape(&self.title),
            escape(&self.subtitle)
        );
        for s in &self.sections {
            let _ = write!(out, "<h2>{}</h2>\n{}\n", escape(&s.title), s.html);
        }
        if !self.questions.is_empty() {
            out.push_str("<h2>Questions as a reader sees them</h2>\n");
            for q in &self.questions {
                let _ = write!(out, "<div class=\"q\"><div class=\"sub\">{}</div><p>{} <b>{}</b> &hellip;</p><ol type=\"a\">", escape(&q.id), escape(&q.context), escape(&q.noun_phrase));
                for (i, o) in q.options.iter().enumerate() {
                    let class = if i == q.answer {
                        " class=\"right\""
                    } else {
                        ""
                    };
                    let _ = write!(out, "<li{class}>{}</li>", escape(o));
                }
                out.push_str("</ol></div>\n");
            }
        }
        out.push_str("</body></html>\n");
        out
    }
}

/// A table from a header and rows of already-formatted cells.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table><tr>");
    for h in header {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr>");
    for r in rows {
        out.push_str("<tr>");
        for c in r {
            let _ = write!(out, "<td>{}</td>", escape(c));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_escapes_text_and_marks_the_answer() {
        let page = Page {
            title: "Run <x>".into(),
            subtitle: "s".into(),
            sections: vec![Section {
                title: "T".into(),
                html: table(&["a", "b"], &[vec!["1".into(), "<2>".into()]]),
            }],
            questions: vec![Question {
                id: "q1".into(),
                context: "A man & a dog.".into(),
                noun_phrase: "The man".into(),
                options: vec!["runs.".into(), "sits.".into()],
                answer: 1,
            }],
        };
        let html = page.render();
        assert!(
            html.contains("Run &lt;x&gt;")
                && html.contains("&lt;2&gt;")
                && html.contains("A man &amp; a dog.")
        );
        assert!(html.contains("<li class=\"right\">sits.</li>"));
        assert!(
            !html.contains("http://") && !html.contains("https://") && !html.contains("<script")
        );
    }
}
