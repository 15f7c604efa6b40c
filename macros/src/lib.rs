//! `#[edge]`: a native function of the quota engine's napi edge (`src/binding/`) from its
//! signature (docs/architecture.md, "The edge").
//!
//! ```text
//! /// The bucket's value (0 when absent).
//! #[edge]
//! pub fn get_bucket(api_key_id: string, dimension_key: string, bucket_index: integer) -> f64 {
//!   with_db(&env, |db| db.get_bucket(&api_key_id, &dimension_key, bucket_index))
//! }
//! ```
//!
//! becomes a `#[napi(catch_unwind, ts_args_type = "apiKeyId: string, dimensionKey: string,
//! bucketIndex: number")]` function of `env: Env` and one `Unknown` per parameter that reads
//! each parameter in order as the argument named after it (`api_key_id` → `apiKeyId`, the
//! path every error names) with its reader, then runs the body, a `crate::error::Result`
//! whose error is thrown as every edge error is (`binding::errors::call`).
//!
//! A reader is `string`, `number`, `integer` or `finite_ms` (the `Arg` methods; TypeScript
//! `string` / `number`), `keep` (the `Arg` itself, for the body to read), or the path of a
//! function of `&Arg`, with the parameter's TypeScript type given as `#[ts = "…"]` (a
//! leading `?` marks the parameter optional: `#[ts = "?number"]`). The attribute's own
//! arguments (`js_name`, `ts_return_type`) go to `#[napi]`. Doc comments pass through
//! untouched: through `macro_rules!` they would reach `binding.d.ts` as raw strings.

use proc_macro::{Delimiter, Group, Spacing, TokenStream, TokenTree};
use std::str::FromStr;

#[proc_macro_attribute]
pub fn edge(options: TokenStream, item: TokenStream) -> TokenStream {
  match expand(options, item) {
    Ok(tokens) => tokens,
    Err(message) => TokenStream::from_str(&format!("compile_error!({message:?});")).unwrap(),
  }
}

/// One parameter: its name, its reader and its TypeScript type.
struct Param {
  name: String,
  reader: String,
  ts: String,
}

fn expand(options: TokenStream, item: TokenStream) -> Result<TokenStream, String> {
  let tokens: Vec<TokenTree> = item.into_iter().collect();
  let fn_at = tokens
    .iter()
    .position(|t| matches!(t, TokenTree::Ident(i) if i.to_string() == "fn"))
    .ok_or("#[edge] goes on a function")?;
  let name = tokens
    .get(fn_at + 1)
    .ok_or("#[edge]: a function name")?
    .to_string();
  let Some(TokenTree::Group(params)) = tokens.get(fn_at + 2) else {
    return Err("#[edge]: a parameter list".into());
  };
  let Some(TokenTree::Group(body)) = tokens.last() else {
    return Err("#[edge]: a body".into());
  };
  // Everything between the parameters and the body: `-> T`, or nothing for `()`.
  let ret: Vec<String> = tokens[fn_at + 3..tokens.len() - 1]
    .iter()
    .map(|t| t.to_string())
    .collect();
  let ret = match ret.split_first() {
    None => "()".to_string(),
    Some((first, rest)) if first == "-" && rest.first().is_some_and(|t| t == ">") => {
      rest[1..].join(" ")
    }
    _ => return Err(format!("#[edge] {name}: expected `-> T` before the body")),
  };
  let params = parse_params(params.stream())?;

  let ts_args = params
    .iter()
    .map(|p| match p.ts.strip_prefix('?') {
      Some(ts) => format!("{}?: {ts}", camel(&p.name)),
      None => format!("{}: {}", camel(&p.name), p.ts),
    })
    .collect::<Vec<_>>()
    .join(", ");
  let mut napi = format!("catch_unwind, ts_args_type = {ts_args:?}");
  let options = options.to_string();
  if !options.trim().is_empty() {
    napi = format!("{napi}, {options}");
  }

  let mut out = TokenStream::new();
  // Attributes and visibility, as written.
  out.extend(tokens[..fn_at].iter().cloned());
  let signature = format!(
    "#[napi_derive::napi({napi})] fn {name}(env: napi::Env{}) -> napi::Result<{ret}>",
    params
      .iter()
      .map(|p| format!(", {}: napi::bindgen_prelude::Unknown", p.name))
      .collect::<String>()
  );
  // The attribute goes before the visibility: rebuild as attributes, `#[napi]`, rest.
  let head: Vec<TokenTree> = out.into_iter().collect();
  let vis_at = head
    .iter()
    .position(|t| matches!(t, TokenTree::Ident(i) if i.to_string() == "pub"))
    .unwrap_or(head.len());
  let mut out = TokenStream::new();
  out.extend(head[..vis_at].iter().cloned());
  let (attr, rest) = signature.split_at(signature.find(" fn ").unwrap());
  out.extend(TokenStream::from_str(attr).map_err(|e| e.to_string())?);
  out.extend(head[vis_at..].iter().cloned());
  out.extend(TokenStream::from_str(rest).map_err(|e| e.to_string())?);

  let reads = params
    .iter()
    .map(|p| {
      format!(
        "let {n} = crate::binding::args::arg({n}, {path:?})?; let {n} = {r}(&{n})?;",
        n = p.name,
        path = camel(&p.name),
        r = p.reader
      )
    })
    .collect::<String>();
  let mut closure = TokenStream::from_str(&reads).map_err(|e| e.to_string())?;
  closure.extend(body.stream());
  let mut call = TokenStream::from_str("&env, ||").unwrap();
  call.extend([TokenTree::Group(Group::new(Delimiter::Brace, closure))]);
  let mut inner = TokenStream::from_str("crate::binding::errors::call").unwrap();
  inner.extend([TokenTree::Group(Group::new(Delimiter::Parenthesis, call))]);
  out.extend([TokenTree::Group(Group::new(Delimiter::Brace, inner))]);
  Ok(out)
}

/// `name: reader` parameters, each optionally after `#[ts = "…"]`.
fn parse_params(stream: TokenStream) -> Result<Vec<Param>, String> {
  let mut params = Vec::new();
  let mut current: Vec<TokenTree> = Vec::new();
  let mut flush = |current: &mut Vec<TokenTree>| -> Result<(), String> {
    if !current.is_empty() {
      params.push(param(std::mem::take(current))?);
    }
    Ok(())
  };
  for token in stream {
    match &token {
      TokenTree::Punct(p) if p.as_char() == ',' && p.spacing() == Spacing::Alone => {
        flush(&mut current)?
      }
      _ => current.push(token),
    }
  }
  flush(&mut current)?;
  Ok(params)
}

fn param(tokens: Vec<TokenTree>) -> Result<Param, String> {
  let mut ts = None;
  let mut rest = &tokens[..];
  if let [TokenTree::Punct(hash), TokenTree::Group(attr), tail @ ..] = rest {
    if hash.as_char() == '#' {
      let inner: Vec<TokenTree> = attr.stream().into_iter().collect();
      match &inner[..] {
        [TokenTree::Ident(key), TokenTree::Punct(eq), TokenTree::Literal(value)]
          if key.to_string() == "ts" && eq.as_char() == '=' =>
        {
          let value = value.to_string();
          ts = Some(value.trim_matches('"').replace("\\\"", "\""));
        }
        _ => return Err(format!("#[edge]: unknown parameter attribute #[{attr}]")),
      }
      rest = tail;
    }
  }
  let [TokenTree::Ident(name), TokenTree::Punct(colon), reader @ ..] = rest else {
    return Err("#[edge]: parameters are `name: reader`".into());
  };
  if colon.as_char() != ':' || reader.is_empty() {
    return Err(format!("#[edge]: parameter {name} is `{name}: reader`"));
  }
  let reader: String = reader.iter().map(|t| t.to_string()).collect();
  let (reader, default_ts) = match reader.as_str() {
    "string" => (
      "crate::binding::args::Arg::string".to_string(),
      Some("string"),
    ),
    "number" | "integer" | "finite_ms" => (
      format!("crate::binding::args::Arg::{reader}"),
      Some("number"),
    ),
    "keep" => ("crate::binding::args::keep".to_string(), None),
    _ => (reader, None),
  };
  let ts = ts
    .or(default_ts.map(str::to_string))
    .ok_or_else(|| format!("#[edge]: parameter {name} needs #[ts = \"…\"]"))?;
  Ok(Param {
    name: name.to_string(),
    reader,
    ts,
  })
}

/// `api_key_id` → `apiKeyId`.
fn camel(name: &str) -> String {
  let mut out = String::with_capacity(name.len());
  let mut upper = false;
  for c in name.chars() {
    if c == '_' {
      upper = true;
    } else if upper {
      out.extend(c.to_uppercase());
      upper = false;
    } else {
      out.push(c);
    }
  }
  out
}

/// `#[derive(FromCore)] #[from_core(path::To::CoreType)]` on a result struct of the edge:
/// `From<&CoreType>` (and `binding::convert::ToJs`, so it nests in other results), each
/// field the core value's field of the same name through `ToJs` (`String` clones, enums as
/// their names, integers as numbers, `Option` and `Vec` element-wise).
#[proc_macro_derive(FromCore, attributes(from_core))]
pub fn from_core(item: TokenStream) -> TokenStream {
  match derive_from_core(item) {
    Ok(tokens) => tokens,
    Err(message) => TokenStream::from_str(&format!("compile_error!({message:?});")).unwrap(),
  }
}

fn derive_from_core(item: TokenStream) -> Result<TokenStream, String> {
  let tokens: Vec<TokenTree> = item.into_iter().collect();
  let mut source = None;
  for pair in tokens.windows(2) {
    if let [TokenTree::Punct(hash), TokenTree::Group(attr)] = pair {
      let text = attr.stream().to_string();
      if hash.as_char() == '#' && text.starts_with("from_core") {
        let inner = text["from_core".len()..].trim();
        source = Some(
          inner
            .trim_start_matches('(')
            .trim_end_matches(')')
            .to_string(),
        );
      }
    }
  }
  let source = source.ok_or("#[derive(FromCore)] needs #[from_core(CoreType)]")?;
  let at = tokens
    .iter()
    .position(|t| matches!(t, TokenTree::Ident(i) if i.to_string() == "struct"))
    .ok_or("#[derive(FromCore)] goes on a struct")?;
  let name = tokens
    .get(at + 1)
    .ok_or("#[derive(FromCore)]: a name")?
    .to_string();
  let Some(TokenTree::Group(body)) = tokens.last() else {
    return Err("#[derive(FromCore)]: named fields".into());
  };
  // Fields are `pub name: Type`.
  let body: Vec<TokenTree> = body.stream().into_iter().collect();
  let fields: Vec<String> = body
    .windows(3)
    .filter_map(|w| match w {
      [TokenTree::Ident(vis), TokenTree::Ident(field), TokenTree::Punct(colon)]
        if vis.to_string() == "pub" && colon.as_char() == ':' =>
      {
        Some(field.to_string())
      }
      _ => None,
    })
    .collect();
  let fields: String = fields
    .iter()
    .map(|f| format!("{f}: crate::binding::convert::ToJs::to_js(&value.{f}),"))
    .collect();
  TokenStream::from_str(&format!(
    "impl From<&{source}> for {name} {{
       fn from(value: &{source}) -> Self {{ {name} {{ {fields} }} }}
     }}
     impl crate::binding::convert::ToJs<{name}> for {source} {{
       fn to_js(&self) -> {name} {{ {name}::from(self) }}
     }}"
  ))
  .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
  use super::camel;

  #[test]
  fn parameter_names_become_the_argument_names_js_sees() {
    assert_eq!(camel("api_key_id"), "apiKeyId");
    assert_eq!(camel("max_updated_at_ms"), "maxUpdatedAtMs");
    assert_eq!(camel("id"), "id");
  }
}
