//! Output: human text (80 columns, colour only when asked), one JSON object, a self-contained HTML page.
pub mod html;
pub mod human;
pub mod json;

/// "0-3,8,10-11"
pub fn ranges(v: &[i64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    out.join(",")
}
