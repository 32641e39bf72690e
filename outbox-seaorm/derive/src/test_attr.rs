//! `#[outbox_testing::test]`: an `async fn name(db: TestDatabase)` run as one
//! test per backend, each on a fresh database.
//!
//! ```ignore
//! #[outbox_testing::test(migrator = crate::Migrator)]
//! async fn writes(db: TestDatabase) { .. }
//! ```
//!
//! becomes
//!
//! ```ignore
//! fn writes() -> ::outbox_testing::database::__private::TestCase {
//!     async fn writes(db: TestDatabase) { .. }
//!     TestCase::new("writes", TestDatabaseOptions::new().migrator::<crate::Migrator>(), writes)
//! }
//! mod writes {
//!     #[test] fn postgres() { super::writes().run(DbBackend::Postgres) }
//!     #[test] fn sqlite() { super::writes().run(DbBackend::Sqlite) }
//! }
//! ```
//!
//! The user's function and every path the user wrote stay in a function body
//! of the user's module, so they resolve as written (`super::`, imports,
//! other crates); the generated module names only `super::writes` (a
//! function: the module is in the type namespace, so both can be `writes`)
//! and `::outbox_testing`.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, ItemFn, LitStr, Path, Token};

/// The options between the attribute's parentheses.
#[derive(Default)]
struct TestOptions {
    /// `migrator = path::to::Migrator`.
    migrator: Option<Path>,
    /// `no_migrations`, with its span for conflicts.
    no_migrations: Option<Span>,
    /// `sqlite`.
    sqlite: bool,
    /// `postgres`.
    postgres: bool,
}

const EXPECTED: &str = "expected `migrator = path::to::Migrator`, `no_migrations`, `sqlite` or \
                        `postgres`";

impl TestOptions {
    /// Parses one option of `#[outbox_testing::test(...)]`.
    fn parse(&mut self, meta: syn::meta::ParseNestedMeta<'_>) -> syn::Result<()> {
        let Some(name) = meta.path.get_ident().map(ToString::to_string) else {
            return Err(meta.error(format!("unknown option; {EXPECTED}")));
        };
        match name.as_str() {
            "migrator" => {
                if self.migrator.is_some() {
                    return Err(meta.error("`migrator` is given twice"));
                }
                if self.no_migrations.is_some() {
                    return Err(meta.error("`migrator` and `no_migrations` exclude each other"));
                }
                let value = meta.value()?;
                if value.peek(LitStr) {
                    let literal: LitStr = value.parse()?;
                    return Err(syn::Error::new(
                        literal.span(),
                        "`migrator` takes the migrator's type, not a string: \
                         `migrator = crate::Migrator`",
                    ));
                }
                self.migrator = Some(value.parse()?);
            }
            "no_migrations" | "sqlite" | "postgres" => {
                if meta.input.peek(Token![=]) || meta.input.peek(syn::token::Paren) {
                    return Err(meta.error(format!("`{name}` takes no value")));
                }
                let seen = match name.as_str() {
                    "no_migrations" => {
                        if self.migrator.is_some() {
                            return Err(
                                meta.error("`migrator` and `no_migrations` exclude each other")
                            );
                        }
                        let seen = self.no_migrations.is_some();
                        self.no_migrations = Some(meta.path.span());
                        seen
                    }
                    "sqlite" => std::mem::replace(&mut self.sqlite, true),
                    _ => std::mem::replace(&mut self.postgres, true),
                };
                if seen {
                    return Err(meta.error(format!("`{name}` is given twice")));
                }
            }
            _ => return Err(meta.error(format!("unknown option `{name}`; {EXPECTED}"))),
        }
        Ok(())
    }
}

/// `#[outbox_testing::test(attr)] item`: the tests, or the error with `item`
/// as written, so that the error comes alone, without warnings about the
/// imports the function used.
pub(crate) fn test(attr: TokenStream, item: TokenStream) -> TokenStream {
    let function: ItemFn = match syn::parse2(item) {
        Ok(function) => function,
        Err(error) => return error.into_compile_error(),
    };
    let mut options = TestOptions::default();
    let parser = syn::meta::parser(|meta| options.parse(meta));
    match Parser::parse2(parser, attr).and_then(|()| expand(options, function.clone())) {
        Ok(tokens) => tokens,
        Err(error) => {
            let error = error.into_compile_error();
            quote! {
                #error
                #[allow(dead_code)]
                #function
            }
        }
    }
}

/// Attributes that belong on the generated `#[test]` functions rather than
/// on the user's.
fn is_test_attribute(attr: &Attribute) -> bool {
    attr.path().is_ident("ignore") || attr.path().is_ident("should_panic")
}

/// Expands `#[outbox_testing::test(options)]` on `function`.
fn expand(options: TestOptions, mut function: ItemFn) -> syn::Result<TokenStream> {
    let signature = &function.sig;
    if signature.asyncness.is_none() {
        return Err(syn::Error::new(
            signature.fn_token.span(),
            "`#[outbox_testing::test]` functions must be `async fn`",
        ));
    }
    if !signature.generics.params.is_empty() || signature.generics.where_clause.is_some() {
        return Err(syn::Error::new(
            signature.generics.span(),
            "`#[outbox_testing::test]` functions cannot be generic",
        ));
    }
    let argument = match (signature.inputs.len(), signature.inputs.first()) {
        (1, Some(FnArg::Typed(argument))) => argument.clone(),
        (_, Some(FnArg::Receiver(receiver))) => {
            return Err(syn::Error::new(
                receiver.span(),
                "`#[outbox_testing::test]` functions cannot take `self`; expected one \
                 argument, `db: TestDatabase`",
            ))
        }
        (count, _) => {
            // The parentheses when there is none, else the first extra one.
            let span = match signature.inputs.iter().nth(1) {
                Some(extra) => extra.span(),
                None => signature.paren_token.span.join(),
            };
            return Err(syn::Error::new(
                span,
                format!(
                    "`#[outbox_testing::test]` functions take one argument, \
                     `db: outbox_testing::database::TestDatabase`, not {count}"
                ),
            ));
        }
    };

    let name = function.sig.ident.clone();
    // Called by the generated module only: private, whatever the user wrote.
    function.vis = syn::Visibility::Inherited;
    let (test_attrs, fn_attrs): (Vec<Attribute>, Vec<Attribute>) =
        function.attrs.drain(..).partition(is_test_attribute);
    function.attrs = fn_attrs;

    let mut database = quote!(::outbox_testing::database::TestDatabaseOptions::new());
    if let Some(migrator) = &options.migrator {
        database.extend(quote_spanned!(migrator.span()=> .migrator::<#migrator>()));
    }
    if let Some(span) = options.no_migrations {
        database.extend(quote_spanned!(span=> .no_migrations()));
    }
    // The argument's type, where a wrong one is reported.
    let db = quote_spanned!(argument.ty.span()=> db);
    let call = quote_spanned!(argument.ty.span()=> #name(#db));

    let both = options.sqlite == options.postgres;
    let mut tests = TokenStream::new();
    for (wanted, backend, variant) in [
        (options.postgres, "postgres", quote!(Postgres)),
        (options.sqlite, "sqlite", quote!(Sqlite)),
    ] {
        if !(both || wanted) {
            continue;
        }
        let test = syn::Ident::new(backend, Span::call_site());
        tests.extend(quote! {
            #[::core::prelude::v1::test]
            #(#test_attrs)*
            fn #test() {
                super::#name().run(::outbox_testing::database::DbBackend::#variant);
            }
        });
    }

    Ok(quote! {
        #[allow(dead_code, reason = "run by the tests of the module below")]
        fn #name() -> ::outbox_testing::database::__private::TestCase {
            #function
            ::outbox_testing::database::__private::TestCase::new(
                ::core::stringify!(#name),
                #database,
                move |#db| #call,
            )
        }

        mod #name {
            #tests
        }
    })
}
