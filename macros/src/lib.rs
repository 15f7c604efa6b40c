//! The attributes of the quota engine's napi edge (`src/binding/`; docs/architecture.md,
//! "The edge"): `#[edge]`, a native function from its signature, and `#[from_core]`, a
//! result struct from a core type. Proc macros, because doc comments passed through
//! `macro_rules!` reach `binding.d.ts` as raw strings.
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
//! A reader is `string`, `number`, `integer` or `finite_ms` (the `Arg` methods), `unit` or
//! `window` (by `engine::input`), `keep` (the `Arg` itself, for the body to read), or the
//! path of a function of `&Arg`, with the parameter's TypeScript type given as `#[ts = "…"]`
//! (`"?number"`: optional). `#[path = "dim.poolId"]` names another path in its errors (a
//! field the glue read off an object and passed on its own). `#[typed]` leaves the parameter
//! to napi's own conversion: its reader is its Rust type (`now_ms: Option<f64>`). The
//! attribute's own arguments (`js_name`, `ts_return_type`) go to `#[napi]`. A body returning
//! `napi::Result<T>` makes the napi value itself (a promise, say) once the arguments are
//! read; `'env` in it makes `env` a `&'env Env`, the lifetime of a `PromiseRaw`.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{quote, ToTokens};
use syn::parse::ParseStream;
use syn::{
  parse_macro_input, Error, Expr, ExprLit, FnArg, ItemFn, ItemStruct, Lit, Meta, Pat, Result,
  ReturnType, Token, Type,
};

#[proc_macro_attribute]
pub fn edge(options: TokenStream, item: TokenStream) -> TokenStream {
  let item = parse_macro_input!(item as ItemFn);
  expand(options.into(), item)
    .unwrap_or_else(Error::into_compile_error)
    .into()
}

/// One parameter: its name, its reader (or, `#[typed]`, its Rust type) and how errors name it.
struct Param {
  name: syn::Ident,
  reader: Tokens,
  ts: String,
  typed: bool,
  path: String,
}

fn expand(options: Tokens, item: ItemFn) -> Result<Tokens> {
  let ItemFn {
    attrs,
    vis,
    sig,
    block,
    ..
  } = item;
  let name = &sig.ident;
  let ret = match &sig.output {
    ReturnType::Default => quote!(()),
    ReturnType::Type(_, ty) => ty.to_token_stream(),
  };
  let ret_text = ret.to_string().replace(' ', "");
  // `-> napi::Result<T>`: the body makes the napi value itself (a promise, say).
  let napi_result = ret_text.starts_with("napi::Result<");
  let params = sig.inputs.iter().map(param).collect::<Result<Vec<_>>>()?;

  let ts_args = params
    .iter()
    .map(|p| {
      let js = camel(&p.name.to_string());
      match p.ts.strip_prefix('?') {
        Some(ts) => format!("{js}?: {ts}"),
        None => format!("{js}: {}", p.ts),
      }
    })
    .collect::<Vec<_>>()
    .join(", ");
  let options = (!options.is_empty()).then(|| quote!(, #options));
  // `'env` in the result (a promise of this call's environment): `env: &'env Env`.
  let (generics, env) = if ret_text.contains("'env") {
    (quote!(<'env>), quote!(env: &'env napi::Env))
  } else {
    (quote!(), quote!(env: napi::Env))
  };
  let inputs = params.iter().map(|p| {
    let (name, reader) = (&p.name, &p.reader);
    match p.typed {
      true => quote!(#name: #reader),
      false => quote!(#name: napi::bindgen_prelude::Unknown),
    }
  });
  let read: Vec<&Param> = params.iter().filter(|p| !p.typed).collect();
  let reads = read.iter().map(|p| {
    let (name, reader, path) = (&p.name, &p.reader, &p.path);
    // A parameter read only to be checked (`dim: Arg::object`) is not otherwise used.
    quote! {
      let #name = crate::binding::args::arg(#name, #path)?;
      #[allow(unused_variables)]
      let #name = #reader(&#name)?;
    }
  });
  let names = read.iter().map(|p| &p.name);
  let stmts = &block.stmts;
  let (ret, body) = if napi_result {
    // The arguments read (each error thrown), then the body as written.
    let names = quote!(#(#names,)*);
    let body = quote! {
      #[allow(unused_variables)]
      let (#names) = crate::binding::errors::call(&env, || { #(#reads)* Ok((#names)) })?;
      #(#stmts)*
    };
    (ret, body)
  } else {
    let body = quote!(crate::binding::errors::call(&env, || { #(#reads)* #(#stmts)* }));
    (quote!(napi::Result<#ret>), body)
  };
  Ok(quote! {
    #(#attrs)*
    // One `Unknown` per parameter plus `env`: the count is the edge's shape, not a smell.
    #[allow(clippy::too_many_arguments)]
    #[napi_derive::napi(catch_unwind, ts_args_type = #ts_args #options)]
    #vis fn #name #generics(#env, #(#inputs),*) -> #ret { #body }
  })
}

/// `#[ts = "…"] #[path = "…"] #[typed] name: reader`.
fn param(arg: &FnArg) -> Result<Param> {
  let FnArg::Typed(arg) = arg else {
    return Err(Error::new_spanned(arg, "#[edge]: no `self`"));
  };
  let Pat::Ident(pat) = &*arg.pat else {
    return Err(Error::new_spanned(
      &arg.pat,
      "#[edge]: parameters are `name: reader`",
    ));
  };
  let (mut ts, mut path, mut typed) = (None, None, false);
  for attr in &arg.attrs {
    match &attr.meta {
      Meta::Path(key) if key.is_ident("typed") => typed = true,
      Meta::NameValue(nv) if nv.path.is_ident("ts") || nv.path.is_ident("path") => {
        let Expr::Lit(ExprLit {
          lit: Lit::Str(value),
          ..
        }) = &nv.value
        else {
          return Err(Error::new_spanned(&nv.value, "#[edge]: a string"));
        };
        match nv.path.is_ident("ts") {
          true => ts = Some(value.value()),
          false => path = Some(value.value()),
        }
      }
      _ => {
        return Err(Error::new_spanned(
          attr,
          "#[edge]: unknown parameter attribute",
        ))
      }
    }
  }
  let name = pat.ident.clone();
  let ty: &Type = &arg.ty;
  let reader_text = ty.to_token_stream().to_string().replace(' ', "");
  let (reader, default_ts) = match reader_text.as_str() {
    // napi's own conversion, whose TypeScript type is known for these.
    _ if typed => {
      let ts = match reader_text.as_str() {
        "Option<f64>" => Some("?number"),
        "bool" => Some("boolean"),
        _ => None,
      };
      (ty.to_token_stream(), ts)
    }
    "string" => (quote!(crate::binding::args::Arg::string), Some("string")),
    "number" => (quote!(crate::binding::args::Arg::number), Some("number")),
    "integer" => (quote!(crate::binding::args::Arg::integer), Some("number")),
    "finite_ms" => (quote!(crate::binding::args::Arg::finite_ms), Some("number")),
    "keep" => (quote!(crate::binding::args::keep), None),
    "unit" => (quote!(crate::engine::input::unit), Some("QuotaUnit")),
    "window" => (quote!(crate::engine::input::window), Some("QuotaWindow")),
    _ => (ty.to_token_stream(), None),
  };
  let ts = ts.or(default_ts.map(str::to_string)).ok_or_else(|| {
    Error::new_spanned(
      &name,
      format!("#[edge]: parameter {name} needs #[ts = \"…\"]"),
    )
  })?;
  Ok(Param {
    path: path.unwrap_or_else(|| camel(&name.to_string())),
    name,
    reader,
    ts,
    typed,
  })
}

/// `api_key_id` → `apiKeyId`.
fn camel(name: &str) -> String {
  let mut parts = name.split('_');
  let mut out = parts.next().unwrap_or_default().to_string();
  for part in parts {
    let mut chars = part.chars();
    out.extend(chars.next().into_iter().flat_map(char::to_uppercase));
    out.push_str(chars.as_str());
  }
  out
}

/// `#[from_core(path::To::CoreType, js_name = "…")]` on a result struct of the edge: the
/// struct as a `#[napi(object, object_from_js = false, …)]` (the arguments after the path go
/// to `#[napi]`), `From<&CoreType>` and `crate::binding::to_js::ToJs` (so it nests in other
/// results), each field the core value's field of the same name through `ToJs` (`String`
/// clones, enums as their names, integers as numbers, `Option` and `Vec` element-wise).
#[proc_macro_attribute]
pub fn from_core(options: TokenStream, item: TokenStream) -> TokenStream {
  let item = parse_macro_input!(item as ItemStruct);
  let parser = |input: ParseStream| {
    let source: syn::Path = input.parse()?;
    let rest = match input.parse::<Option<Token![,]>>()? {
      Some(comma) => {
        let rest: Tokens = input.parse()?;
        quote!(#comma #rest)
      }
      None => Tokens::new(),
    };
    Ok((source, rest))
  };
  let (source, rest) = parse_macro_input!(options with parser);
  let fields: Vec<_> = item
    .fields
    .iter()
    .filter_map(|f| f.ident.as_ref())
    .collect();
  let name = &item.ident;
  quote! {
    #[napi_derive::napi(object, object_from_js = false #rest)]
    #item
    impl From<&#source> for #name {
      fn from(value: &#source) -> Self {
        #name { #(#fields: crate::binding::to_js::ToJs::to_js(&value.#fields),)* }
      }
    }
    impl crate::binding::to_js::ToJs<#name> for #source {
      fn to_js(&self) -> #name {
        #name::from(self)
      }
    }
  }
  .into()
}
