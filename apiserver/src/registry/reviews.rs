//! The create-only review kinds (TokenReview, SelfSubjectReview, SubjectAccessReview,
//! LocalSubjectAccessReview, SelfSubjectAccessReview, SelfSubjectRulesReview): their
//! registrations and their one rule, the typed roundtrip. A review is never stored; its
//! answer is computed in [`answer`] (which sits above `authz/`: see its doc), its POST
//! handled by `api/reviews.rs`.

pub mod answer;

use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::api::{authentication::v1 as authnv1, authorization::v1 as authzv1};
use serde_json::Value;

use super::{typed_roundtrip, ResourceDef, SchemaFn, Strategy};

pub const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
pub const AUTHORIZATION_GROUP: &str = "authorization.k8s.io";

/// The review kinds served.
pub fn resources() -> Vec<ResourceDef> {
    vec![
        review::<authnv1::TokenReview>(
            AUTHENTICATION_GROUP,
            "tokenreviews",
            "tokenreview",
            "TokenReview",
            false,
            |g| g.subschema_for::<authnv1::TokenReview>(),
        ),
        review::<authnv1::SelfSubjectReview>(
            AUTHENTICATION_GROUP,
            "selfsubjectreviews",
            "selfsubjectreview",
            "SelfSubjectReview",
            false,
            |g| g.subschema_for::<authnv1::SelfSubjectReview>(),
        ),
        review::<authzv1::SubjectAccessReview>(
            AUTHORIZATION_GROUP,
            "subjectaccessreviews",
            "subjectaccessreview",
            "SubjectAccessReview",
            false,
            |g| g.subschema_for::<authzv1::SubjectAccessReview>(),
        ),
        review::<authzv1::LocalSubjectAccessReview>(
            AUTHORIZATION_GROUP,
            "localsubjectaccessreviews",
            "localsubjectaccessreview",
            "LocalSubjectAccessReview",
            true,
            |g| g.subschema_for::<authzv1::LocalSubjectAccessReview>(),
        ),
        review::<authzv1::SelfSubjectAccessReview>(
            AUTHORIZATION_GROUP,
            "selfsubjectaccessreviews",
            "selfsubjectaccessreview",
            "SelfSubjectAccessReview",
            false,
            |g| g.subschema_for::<authzv1::SelfSubjectAccessReview>(),
        ),
        review::<authzv1::SelfSubjectRulesReview>(
            AUTHORIZATION_GROUP,
            "selfsubjectrulesreviews",
            "selfsubjectrulesreview",
            "SelfSubjectRulesReview",
            false,
            |g| g.subschema_for::<authzv1::SelfSubjectRulesReview>(),
        ),
    ]
}

fn review<T>(
    group: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    schema: SchemaFn,
) -> ResourceDef
where
    T: serde::de::DeserializeOwned + serde::Serialize + 'static,
{
    ResourceDef {
        group,
        version: "v1",
        resource,
        singular,
        kind,
        namespaced,
        short_names: &[],
        categories: &[],
        subresources: &[],
        create_only: true,
        strategy: Arc::new(ReviewStrategy::<T>(PhantomData)),
        schema,
    }
}

/// A review's only rule besides its computation: the typed roundtrip (unknown fields, types).
struct ReviewStrategy<T>(PhantomData<fn() -> T>);

impl<T> Strategy for ReviewStrategy<T>
where
    T: serde::de::DeserializeOwned + serde::Serialize + 'static,
{
    fn roundtrip(&self, obj: &Value) -> Result<Value, crate::registry::DecodeError> {
        typed_roundtrip::<T>(obj)
    }
}
