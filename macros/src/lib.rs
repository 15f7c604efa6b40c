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
//! `string` / `number`), `unit` or `window` (a `QuotaUnit` / `QuotaWindow`, by
//! `engine::input`), `keep` (the `Arg` itself, for the body to read), or the path of a
//! function of `&Arg`, with the parameter's TypeScript type given as `#[ts = "…"]` (a
//! leading `?` marks the parameter optional: `#[ts = "?number"]`). The attribute's own
//! arguments (`js_name`, `ts_return_type`) go to `#[napi]`. Doc comments pass through
//! untouched: through `macro_rules!` they would reach `binding.d.ts` as raw strings.
//!
//! `#[path = "dim.poolId"]` before a parameter names that path in its errors instead
//! (a field the JavaScript glue read off an object and passed on its own).
//!
//! `#[typed]` before a parameter leaves it to napi's own conversion: its reader is its Rust
//! type (`now_ms: Option<f64>`; `#[ts]` may be left out for `f64`, `u32`, `String`, `bool`
//! and their `Option`s). A body whose return type is written `napi::Result<T>` makes the napi value
//! itself (a promise, say): the arguments are read first, each error thrown, and the body
//! runs as written; `'env` in it makes the function's `env` a `&'env Env`, the lifetime of
//! a `PromiseRaw`.

use proc_macro::{Delimiter, Group, Spacing, TokenStream, TokenTree};
use std::str::FromStr;

#[proc_macro_attribute]
pub fn edge(options: TokenStream, item: TokenStream) -> TokenStream {
  let tokens: Vec<TokenTree> = item.into_iter().collect();
  let result = expand(options, tokens);
  match result {
    Ok(tokens) => tokens,
    Err(message) => TokenStream::from_str(&format!("compile_error!({message:?});")).unwrap(),
  }
}

fn is_ident(token: &TokenTree, name: &str) -> bool {
  matches!(token, TokenTree::Ident(i) if i.to_string() == name)
}

fn is_punct(token: &TokenTree, c: char) -> bool {
  matches!(token, TokenTree::Punct(p) if p.as_char() == c)
}

/// One parameter: its name, its reader and its TypeScript type.
struct Param {
  name: String,
  reader: String,
  ts: String,
  /// `#[typed]`: napi converts it; `reader` is its Rust type.
  typed: bool,
  /// `#[path = "…"]`: the path its errors name, when not its own name.
  path: Option<String>,
}

fn expand(options: TokenStream, tokens: Vec<TokenTree>) -> Result<TokenStream, String> {
  let fn_at = tokens
    .iter()
    .position(|t| is_ident(t, "fn"))
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
  let ret = &tokens[fn_at + 3..tokens.len() - 1];
  let ret = match ret {
    [] => "()".to_string(),
    [arrow, gt, rest @ ..] if is_punct(arrow, '-') && is_punct(gt, '>') => {
      rest.iter().cloned().collect::<TokenStream>().to_string()
    }
    _ => return Err(format!("#[edge] {name}: expected `-> T` before the body")),
  };
  // `-> napi::Result<T>`: the body makes the napi value itself (a promise, say).
  let napi_result = ret.replace(' ', "").starts_with("napi::Result<");
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

  // `'env` in the result (a promise of this call's environment): `env: &'env Env`.
  let (generics, env) = if ret.contains("'env") {
    ("<'env>", "env: &'env napi::Env")
  } else {
    ("", "env: napi::Env")
  };
  let signature = format!(
    // One `Unknown` per parameter plus `env`: the count is the edge's shape, not a smell.
    "#[allow(clippy::too_many_arguments)] #[napi_derive::napi({napi})] fn {name}{generics}({env}{}) -> {}",
    params
      .iter()
      .map(|p| match p.typed {
        true => format!(", {}: {}", p.name, p.reader),
        false => format!(", {}: napi::bindgen_prelude::Unknown", p.name),
      })
      .collect::<String>(),
    if napi_result {
      ret
    } else {
      format!("napi::Result<{ret}>")
    }
  );
  // The attribute goes before the visibility: rebuild as attributes, `#[napi]`, rest.
  let head = &tokens[..fn_at];
  let vis_at = head
    .iter()
    .position(|t| is_ident(t, "pub"))
    .unwrap_or(head.len());
  let mut out = TokenStream::new();
  out.extend(head[..vis_at].iter().cloned());
  let (attr, rest) = signature.split_at(signature.find(" fn ").unwrap());
  out.extend(TokenStream::from_str(attr).map_err(|e| e.to_string())?);
  out.extend(head[vis_at..].iter().cloned());
  out.extend(TokenStream::from_str(rest).map_err(|e| e.to_string())?);

  let read: Vec<&Param> = params.iter().filter(|p| !p.typed).collect();
  let reads = read
    .iter()
    .map(|p| {
      format!(
        "let {n} = crate::binding::args::arg({n}, {path:?})?; let {n} = {r}(&{n})?;",
        n = p.name,
        path = p.path.clone().unwrap_or_else(|| camel(&p.name)),
        r = p.reader
      )
    })
    .collect::<String>();
  let call = |closure: TokenStream| {
    let mut call = TokenStream::from_str("&env, ||").unwrap();
    call.extend([TokenTree::Group(Group::new(Delimiter::Brace, closure))]);
    let mut inner = TokenStream::from_str("crate::binding::errors::call").unwrap();
    inner.extend([TokenTree::Group(Group::new(Delimiter::Parenthesis, call))]);
    inner
  };
  let inner = if napi_result {
    // The arguments read (each error thrown), then the body as written.
    let names: String = read.iter().map(|p| format!("{},", p.name)).collect();
    let closure =
      TokenStream::from_str(&format!("{reads} Ok(({names}))")).map_err(|e| e.to_string())?;
    let mut inner = TokenStream::from_str(&format!("let ({names}) =")).unwrap();
    inner.extend(call(closure));
    inner.extend(TokenStream::from_str("?;").unwrap());
    inner.extend(body.stream());
    inner
  } else {
    let mut closure = TokenStream::from_str(&reads).map_err(|e| e.to_string())?;
    closure.extend(body.stream());
    call(closure)
  };
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
  let mut path = None;
  let mut typed = false;
  let mut rest = &tokens[..];
  while let [TokenTree::Punct(hash), TokenTree::Group(attr), tail @ ..] = rest {
    if hash.as_char() != '#' {
      break;
    }
    let inner: Vec<TokenTree> = attr.stream().into_iter().collect();
    match &inner[..] {
      [TokenTree::Ident(key), TokenTree::Punct(eq), TokenTree::Literal(value)]
        if eq.as_char() == '=' && matches!(key.to_string().as_str(), "ts" | "path") =>
      {
        let value = Some(value.to_string().trim_matches('"').replace("\\\"", "\""));
        match key.to_string().as_str() {
          "ts" => ts = value,
          _ => path = value,
        }
      }
      [TokenTree::Ident(key)] if key.to_string() == "typed" => typed = true,
      _ => return Err(format!("#[edge]: unknown parameter attribute #[{attr}]")),
    }
    rest = tail;
  }
  let [TokenTree::Ident(name), TokenTree::Punct(colon), reader @ ..] = rest else {
    return Err("#[edge]: parameters are `name: reader`".into());
  };
  if colon.as_char() != ':' || reader.is_empty() {
    return Err(format!("#[edge]: parameter {name} is `{name}: reader`"));
  }
  let reader: String = reader.iter().cloned().collect::<TokenStream>().to_string();
  let (reader, default_ts) = match reader.as_str() {
    // napi's own conversion, whose TypeScript type is known for these.
    _ if typed => {
      let ts = match reader.replace(' ', "").as_str() {
        "f64" | "u32" => Some("number"),
        "Option<f64>" => Some("?number"),
        "String" => Some("string"),
        "Option<String>" => Some("?string"),
        "bool" => Some("boolean"),
        "Option<bool>" => Some("?boolean"),
        _ => None,
      };
      (reader, ts)
    }
    "string" => (
      "crate::binding::args::Arg::string".to_string(),
      Some("string"),
    ),
    "number" | "integer" | "finite_ms" => (
      format!("crate::binding::args::Arg::{reader}"),
      Some("number"),
    ),
    "keep" => ("crate::binding::args::keep".to_string(), None),
    "unit" | "window" => (
      format!("crate::engine::input::{reader}"),
      Some(if reader == "unit" {
        "QuotaUnit"
      } else {
        "QuotaWindow"
      }),
    ),
    _ => (reader, None),
  };
  let ts = ts
    .or(default_ts.map(str::to_string))
    .ok_or_else(|| format!("#[edge]: parameter {name} needs #[ts = \"…\"]"))?;
  Ok(Param {
    name: name.to_string(),
    reader,
    ts,
    typed,
    path,
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
/// `From<&CoreType>` (and `napi_raw::to_js::ToJs`, so it nests in other results), each
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
    .map(|f| format!("{f}: napi_raw::to_js::ToJs::to_js(&value.{f}),"))
    .collect();
  TokenStream::from_str(&format!(
    "impl From<&{source}> for {name} {{
       fn from(value: &{source}) -> Self {{ {name} {{ {fields} }} }}
     }}
     impl napi_raw::to_js::ToJs<{name}> for {source} {{
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
