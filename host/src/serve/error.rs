//! The error every failure is answered with, in OpenAI's shape.

use serde_json::{json, Value};

/// An error answered in OpenAI's shape: `{"error": {message, type, param, code}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// One line saying what is wrong.
    pub message: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn bad(param: &str, message: impl Into<String>) -> ApiError {
        ApiError { status: 400, message: one_line(message.into()), param: Some(param.into()) }
    }

    /// An error with `status` and no field.
    pub fn status(status: u16, message: impl Into<String>) -> ApiError {
        ApiError { status, message: one_line(message.into()), param: None }
    }

    /// OpenAI's `type` for the status.
    fn kind(&self) -> &'static str {
        match self.status {
            401 => "authentication_error",
            404 => "not_found_error",
            429 | 503 => "server_overloaded",
            400 | 413 | 422 => "invalid_request_error",
            _ => "server_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind(), "param": self.param, "code": Value::Null}})
    }
}

/// A message on one line (a grammar compiler's report spans several).
fn one_line(m: String) -> String {
    m.split('\n').map(str::trim).filter(|l| !l.is_empty() && !l.chars().all(|c| c == '^')).collect::<Vec<_>>().join(" ")
}
