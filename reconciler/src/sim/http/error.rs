//! API errors as Kubernetes `Status` objects.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::resources::{self, Rid};

/// A failed request: HTTP code, `reason`, message and optional `details`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Status reason (`NotFound`, `Conflict`, …).
    pub reason: &'static str,
    /// Human message.
    pub message: String,
    /// `details`, when any.
    pub details: Option<Value>,
}

impl ApiError {
    /// An error with a code, reason and message.
    pub fn new(code: u16, reason: &'static str, message: String) -> Self {
        ApiError {
            code,
            reason,
            message,
            details: None,
        }
    }

    /// Adds `details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    fn about(rid: Rid, name: &str) -> Value {
        let def = resources::def(rid);
        json!({"name": name, "group": def.group, "kind": def.plural})
    }

    fn qualified(rid: Rid) -> String {
        let def = resources::def(rid);
        if def.group.is_empty() {
            def.plural.to_string()
        } else {
            format!("{}.{}", def.plural, def.group)
        }
    }

    /// 404 NotFound.
    pub fn not_found(rid: Rid, name: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", Self::qualified(rid)),
        )
        .with_details(Self::about(rid, name))
    }

    /// 409 AlreadyExists.
    pub fn already_exists(rid: Rid, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", Self::qualified(rid)),
        )
        .with_details(Self::about(rid, name))
    }

    /// 409 Conflict.
    pub fn conflict(rid: Rid, name: &str, why: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                Self::qualified(rid)
            ),
        )
        .with_details(Self::about(rid, name))
    }

    /// 403 Forbidden, as admission refuses a request.
    pub fn forbidden(rid: Rid, name: &str, why: &str) -> Self {
        ApiError::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {why}", Self::qualified(rid)),
        )
        .with_details(Self::about(rid, name))
    }

    /// 422 Invalid.
    pub fn invalid(rid: Rid, name: &str, why: String) -> Self {
        let kind = resources::def(rid).kind;
        ApiError::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {why}"),
        )
        .with_details(
            json!({"name": name, "group": resources::def(rid).group, "kind": kind,
                   "causes": [{"reason": "FieldValueInvalid", "message": why}]}),
        )
    }

    /// 422 Invalid with every field error, in apimachinery's words (`Kind "name" is invalid:
    /// field: message`, several in brackets).
    pub fn invalid_fields(rid: Rid, name: &str, errors: &[super::admission::FieldError]) -> Self {
        let kind = resources::def(rid).kind;
        let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let why = match rendered.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.reason, "message": e.message, "field": e.field}))
            .collect();
        // The name is quoted as Go's `%q` does.
        ApiError::new(422, "Invalid", format!("{kind} {name:?} is invalid: {why}")).with_details(
            json!({"name": name, "group": resources::def(rid).group, "kind": kind,
                                 "causes": causes}),
        )
    }

    /// 400 BadRequest.
    pub fn bad_request(message: String) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// A JSON response.
pub fn json_response(code: u16, body: &Value) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        code,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json_response(self.code, &self.status())
    }
}
