"""API for policies: `/api/v1/policies` (members read, platform admins write), versions,
validation, "try it", the 7-day replay, violations and team approvals (admins)."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.permissions import IsAdminOrReadOnly, is_platform_admin
from quotas.models import Team

from . import selectors, services
from .checks import definition_errors
from .filters import PolicyViolationFilter
from .models import Policy, PolicyKind, PolicyMode, TeamApproval
from .rules import ORDER_MAX, ORDER_MIN
from .specs import PolicyFileError, check_fields, normalise, read_document

MAX_TEST_FILES = 1000  # files in one `POST /api/v1/policy-tests`


class IsPlatformAdmin(BasePermission):
    """Platform admins only (violations hold other teams' requests)."""

    message = "Only platform admins may see this."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return is_platform_admin(request.user)


class PolicyOutput(serializers.ModelSerializer):
    updated_by: Any = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Policy
        fields = ["name", "description", "kind", "mode", "scope", "order", "key", "match",
                  "rule", "message", "version", "hits", "denials", "created_at", "updated_at",
                  "updated_by"]


class PolicyInput(serializers.Serializer):
    name = serializers.SlugField(max_length=100)
    description = serializers.CharField(allow_blank=True, required=False)
    kind = serializers.ChoiceField(choices=PolicyKind.choices)
    mode = serializers.ChoiceField(choices=PolicyMode.choices, required=False)
    scope = serializers.ListField(child=serializers.CharField(), required=False)
    order = serializers.IntegerField(required=False, min_value=ORDER_MIN, max_value=ORDER_MAX)
    key = serializers.CharField(allow_blank=True, required=False)
    match = serializers.CharField(required=False)
    rule = serializers.CharField()
    message = serializers.CharField(allow_blank=True, required=False)
    comment = serializers.CharField(allow_blank=True, required=False, write_only=True)


class VersionOutput(serializers.Serializer):
    version = serializers.IntegerField()
    author = serializers.CharField(source="author.username", default=None)
    at = serializers.DateTimeField()
    comment = serializers.CharField()
    diff = serializers.CharField()
    content = serializers.DictField()


class ViolationOutput(serializers.Serializer):
    id = serializers.IntegerField()
    policy = serializers.CharField(source="policy.name")
    policy_version = serializers.IntegerField()
    mode = serializers.CharField()
    outcome = serializers.CharField()
    code = serializers.CharField()
    at = serializers.DateTimeField()
    subject = serializers.CharField()
    queue = serializers.CharField(source="queue_path")
    user = serializers.CharField(source="user.username", default=None)
    workload_id = serializers.IntegerField(allow_null=True)
    expression = serializers.CharField()
    message = serializers.CharField()
    input = serializers.DictField()


def _get(name: str) -> Policy:
    services.policy_counts_flush()  # this process's buffered hits show
    try:
        return Policy.objects.get(name=name)
    except Policy.DoesNotExist as exc:
        raise Http404(f"No policy named {name!r}.") from exc


class PolicyList(APIView):
    """The policies; admins create them (invalid CEL -> 400 with line and column)."""

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(responses=PolicyOutput(many=True))
    def get(self, request: Request) -> Response:
        return Response(PolicyOutput(selectors.policy_list(), many=True).data)

    @extend_schema(request=PolicyInput, responses={201: PolicyOutput})
    def post(self, request: Request) -> Response:
        data = PolicyInput(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        comment = fields.pop("comment", "")
        policy = services.policy_create(user=request.user, data=fields, comment=comment)
        return Response(PolicyOutput(policy).data, status=status.HTTP_201_CREATED)


class PolicyDetail(APIView):
    """One policy; a change (PATCH) becomes a new version; DELETE removes it and its history."""

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(responses=PolicyOutput)
    def get(self, request: Request, name: str) -> Response:
        return Response(PolicyOutput(_get(name)).data)

    @extend_schema(request=PolicyInput(partial=True), responses=PolicyOutput)
    def patch(self, request: Request, name: str) -> Response:
        policy = _get(name)
        data = PolicyInput(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        comment = fields.pop("comment", "")
        policy = services.policy_update(user=request.user, policy=policy, data=fields,
                                        comment=comment)
        return Response(PolicyOutput(policy).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, name: str) -> Response:
        services.policy_delete(user=request.user, policy=_get(name))
        return Response(status=status.HTTP_204_NO_CONTENT)


class PolicyVersions(APIView):
    """A policy's versions, newest first, each with author, time and diff."""

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(responses=VersionOutput(many=True))
    def get(self, request: Request, name: str) -> Response:
        return Response(VersionOutput(selectors.policy_versions(_get(name)), many=True).data)


class ValidateInput(serializers.Serializer):
    policy = serializers.DictField()


class PolicyValidate(APIView):
    """Check a policy definition without saving it: field errors with CEL positions."""

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(request=ValidateInput, responses=inline_serializer(
        "PolicyValidation", {"valid": serializers.BooleanField(),
                             "errors": serializers.DictField()}))
    def post(self, request: Request) -> Response:
        data = ValidateInput(data=request.data)
        data.is_valid(raise_exception=True)
        errors = check_fields(normalise(data.validated_data["policy"]))
        return Response({"valid": not errors, "errors": errors})


class TryInput(serializers.Serializer):
    input = serializers.DictField(help_text="A sample context; unset fields are neutral.")
    policy = serializers.DictField(required=False, help_text="Unsaved changes to try.")


def _spec_for(policy: Policy, changes: dict[str, Any] | None) -> Any:
    from .specs import to_spec

    definition = {**services.policy_content(policy), **(changes or {})}
    errors = definition_errors(normalise(definition))
    if errors:
        raise serializers.ValidationError(errors)
    return to_spec(definition)


class PolicyTry(APIView):
    """Evaluate a policy (with optional unsaved changes) on a sample request."""

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(request=TryInput, responses=inline_serializer(
        "PolicyTryResult", {"matched": serializers.BooleanField(allow_null=True),
                            "value": serializers.JSONField(),
                            "decision": serializers.CharField(),
                            "message": serializers.CharField(),
                            "error": serializers.CharField()}))
    def post(self, request: Request, name: str) -> Response:
        data = TryInput(data=request.data)
        data.is_valid(raise_exception=True)
        spec = _spec_for(_get(name), data.validated_data.get("policy"))
        result = selectors.policy_try(spec, data.validated_data["input"])
        return Response(result.__dict__)


class PolicyTestFileInput(serializers.Serializer):
    path = serializers.CharField(max_length=1000, help_text="The file's name, for messages.")
    document = serializers.JSONField(
        help_text="The file's parsed YAML: one policy (a mapping) or `{policies: [...]}`, "
                  "each with its `tests`.")


class PolicyTestInput(serializers.Serializer):
    files = serializers.ListField(child=PolicyTestFileInput(), allow_empty=False,
                                  max_length=MAX_TEST_FILES)


class MayRunPolicyTests(IsPlatformAdmin):
    """Platform admins, who alone change policies (and whose cases run in the web process)."""

    message = "Only platform admins may run policy tests."


class PolicyTests(APIView):
    """Run the test cases of policy files, as `manage.py policies_test DIR` does; nothing is
    saved. Each policy first passes the checks of a save (CEL, cost), else it is one failed
    case. 200 with every case's outcome, whether they pass or not."""

    permission_classes = [MayRunPolicyTests]

    @extend_schema(request=PolicyTestInput, responses=inline_serializer(
        "PolicyTestReport", {
            "passed": serializers.IntegerField(), "failed": serializers.IntegerField(),
            "policies": serializers.IntegerField(), "files": serializers.IntegerField(),
            "results": serializers.ListField(child=inline_serializer("PolicyTestCase", {
                "file": serializers.CharField(), "policy": serializers.CharField(),
                "case": serializers.CharField(), "passed": serializers.BooleanField(),
                "detail": serializers.CharField()}))}))
    def post(self, request: Request) -> Response:
        data = PolicyTestInput(data=request.data)
        data.is_valid(raise_exception=True)
        files, problems = [], []
        for item in data.validated_data["files"]:
            try:
                files.append(read_document(item["path"], item["document"]))
            except PolicyFileError as exc:
                problems.append(str(exc))
        if problems:
            raise serializers.ValidationError({"files": problems})
        results = [{"file": f.path, **r.__dict__}
                   for f in files for r in selectors.policy_file_test(f)]
        failed = sum(1 for r in results if not r["passed"])
        return Response({"passed": len(results) - failed, "failed": failed,
                         "policies": sum(len(f.policies) for f in files), "files": len(files),
                         "results": results})


class ReplayInput(serializers.Serializer):
    days = serializers.IntegerField(min_value=1, max_value=90, default=7)
    policy = serializers.DictField(required=False, help_text="Unsaved changes to replay.")


class PolicyReplay(APIView):
    """What this policy would have denied (or changed) over the last days' submissions."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(request=ReplayInput, responses=inline_serializer(
        "PolicyReplayReport", {
            "policy": serializers.CharField(), "days": serializers.IntegerField(),
            "replayed": serializers.IntegerField(), "matched": serializers.IntegerField(),
            "denied": serializers.IntegerField(), "errors": serializers.IntegerField(),
            "changed": serializers.IntegerField(), "note": serializers.CharField(),
            "hits": serializers.ListField(child=serializers.DictField())}))
    def post(self, request: Request, name: str) -> Response:
        data = ReplayInput(data=request.data)
        data.is_valid(raise_exception=True)
        spec = _spec_for(_get(name), data.validated_data.get("policy"))
        report = selectors.policy_replay(spec, days=data.validated_data["days"])
        body = dict(report.__dict__)
        body["hits"] = [
            {**h.__dict__, "submitted_at": h.submitted_at.isoformat()} for h in report.hits
        ]
        return Response(body)


class ViolationList(generics.ListAPIView):
    """Recorded policy decisions (denials, audits, errors, effects), newest first (admins)."""

    permission_classes = [IsPlatformAdmin]
    serializer_class = ViolationOutput
    filterset_class = PolicyViolationFilter

    def get_queryset(self) -> Any:
        return selectors.violation_list()


class ApprovalOutput(serializers.Serializer):
    team = serializers.CharField(source="team.name")
    name = serializers.CharField()
    note = serializers.CharField()
    granted_by = serializers.CharField(source="granted_by.username", default=None)
    granted_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)


class ApprovalInput(serializers.Serializer):
    team = serializers.SlugField()
    name = serializers.SlugField(max_length=63)
    note = serializers.CharField(allow_blank=True, required=False, max_length=300)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class ApprovalList(APIView):
    """Team approvals rules read as `team.approvals` (members read, admins grant)."""

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(responses=ApprovalOutput(many=True))
    def get(self, request: Request) -> Response:
        qs = TeamApproval.objects.select_related("team", "granted_by")
        return Response(ApprovalOutput(qs, many=True).data)

    @extend_schema(request=ApprovalInput, responses={201: ApprovalOutput})
    def post(self, request: Request) -> Response:
        data = ApprovalInput(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        team = Team.objects.filter(name=fields.pop("team")).first()
        if team is None:
            raise serializers.ValidationError({"team": [f"no team named "
                                                        f"{data.validated_data['team']!r}"]})
        approval = services.team_approval_grant(user=request.user, team=team, **fields)
        return Response(ApprovalOutput(approval).data, status=status.HTTP_201_CREATED)


class ApprovalDetail(APIView):
    """Revoke one approval."""

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(responses={204: None})
    def delete(self, request: Request, team: str, name: str) -> Response:
        approval = TeamApproval.objects.filter(team__name=team, name=name).first()
        if approval is None:
            raise Http404(f"Team {team!r} holds no approval {name!r}.")
        services.team_approval_revoke(user=request.user, team=approval.team, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)
