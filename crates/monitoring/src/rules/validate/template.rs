//! The one template mistake Prometheus refuses at load time that is checked here: an action
//! opened with `{{` and never closed. Prometheus parses an alerting rule's label and annotation
//! values as Go templates; a full Go template parser is out of scope, so other template errors
//! (an unknown function, a bad pipeline) still reach Prometheus. The check never refuses a
//! template Go accepts: every action needs its `}}`.

/// Ok, or `unclosed action`.
pub(super) fn check(value: &str) -> Result<(), String> {
    let mut rest = value;
    while let Some(open) = rest.find("{{") {
        let inside = &rest[open + 2..];
        match inside.find("}}") {
            Some(close) => rest = &inside[close + 2..],
            None => return Err("unclosed action (a \"{{\" without its \"}}\")".to_string()),
        }
    }
    Ok(())
}
