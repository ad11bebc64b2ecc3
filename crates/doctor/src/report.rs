//! The doctor report: stable JSON (`mrshim_doctor` is its schema version), also read by `mrshim analyze`.
use serde::{Deserialize, Serialize};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One check. `value` is the short human answer; `raw` holds machine-readable data (e.g. memlock bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub id: String,
    pub title: String,
    pub status: Status,
    pub value: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub raw: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub mrshim_doctor: u32,
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn check(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }
    pub fn worst(&self) -> Status {
        self.checks.iter().map(|c| c.status).max().unwrap_or(Status::Ok)
    }
    pub fn count(&self, s: Status) -> usize {
        self.checks.iter().filter(|c| c.status == s).count()
    }
}

/// `Some(None)` = unlimited, `Some(Some(n))` = n bytes; from a `raw` object `{"soft": n|null, ...}`.
pub fn memlock_soft(r: &Report) -> Option<Option<u64>> {
    let raw = &r.check("memlock")?.raw;
    let soft = raw.get("soft")?;
    if soft.is_null() {
        Some(None)
    } else {
        soft.as_u64().map(Some)
    }
}
