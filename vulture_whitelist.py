"""Names vulture reports as unused that Django, DRF, django-filter, Celery or the Kubernetes
client use by name (or that templates read): `make lint` passes this file to vulture with the
code. Vulture matches names, not places: one entry covers every definition of the name.
Each entry says who uses it.
"""

# --- Django settings (read by Django, DRF, drf-spectacular and Celery from portal/settings.py)
_.ALLOWED_HOSTS  # django: accepted Host headers
_.AUTH_PASSWORD_VALIDATORS  # django.contrib.auth: password rules
_.AUTHENTICATION_BACKENDS  # django.contrib.auth: who checks passwords
_.LimitedModelBackend  # django.contrib.auth: named in AUTHENTICATION_BACKENDS
_.HealthMiddleware  # django: named in MIDDLEWARE (portal/health.py)
_.CSRF_TRUSTED_ORIGINS  # django: CSRF origins
_.DEFAULT_AUTO_FIELD  # django: primary key type
_.EMAIL_BACKEND  # django.core.mail
_.INSTALLED_APPS  # django: the apps
_.LANGUAGE_CODE  # django: i18n
_.LOGGING  # django: logging config
_.LOGIN_REDIRECT_URL  # django.contrib.auth views
_.LOGIN_URL  # django.contrib.auth: login_required
_.LOGOUT_REDIRECT_URL  # django.contrib.auth views
_.MIDDLEWARE  # django: request pipeline
_.PASSWORD_HASHERS  # django.contrib.auth: hashers
_.REST_FRAMEWORK  # DRF settings
_.ROOT_URLCONF  # django: URL root
_.SPECTACULAR_SETTINGS  # drf-spectacular settings
_.STATICFILES_DIRS  # django.contrib.staticfiles
_.STATIC_ROOT  # django.contrib.staticfiles: collectstatic
_.STATIC_URL  # django.contrib.staticfiles
_.STORAGES  # django: the static files' storage (WhiteNoise's compressed one)
_.SECRET_KEY_FALLBACKS  # django.core.signing: earlier keys accepted while rotating
_.TEMPLATES  # django: template engines
_.TIME_ZONE  # django: time zone
_.USE_I18N  # django: i18n
_.USE_TZ  # django: aware datetimes
_.WSGI_APPLICATION  # django: runserver's WSGI app
_.SECURE_SSL_REDIRECT  # django.middleware.security: redirect to HTTPS
_.SECURE_REDIRECT_EXEMPT  # django.middleware.security: paths not redirected
_.SECURE_HSTS_SECONDS  # django.middleware.security: Strict-Transport-Security
_.SECURE_HSTS_INCLUDE_SUBDOMAINS  # django.middleware.security: HSTS includeSubDomains
_.SECURE_HSTS_PRELOAD  # django.middleware.security: HSTS preload
_.SECURE_PROXY_SSL_HEADER  # django: request.is_secure() behind a proxy
_.SESSION_COOKIE_SECURE  # django.contrib.sessions: Secure cookie
_.CSRF_COOKIE_SECURE  # django.middleware.csrf: Secure cookie
_.CONTENT_SECURITY_POLICY  # django-csp: the enforced policy
_.CONTENT_SECURITY_POLICY_REPORT_ONLY  # django-csp: the reported-only policy
_.RATELIMIT_IP_META_KEY  # django-ratelimit: where the client's address is
_.RATELIMIT_FAIL_OPEN  # django-ratelimit: a cache that cannot count lets requests through
_.CELERY_BEAT_SCHEDULE  # celery (namespace CELERY): beat_schedule
_.CELERY_BROKER_TRANSPORT_OPTIONS  # celery: broker_transport_options
_.CELERY_RESULT_BACKEND  # celery: result_backend
_.CELERY_TASK_ALWAYS_EAGER  # celery: task_always_eager
_.CELERY_TIMEZONE  # celery: timezone
_.CELERY_WORKER_PREFETCH_MULTIPLIER  # celery: worker_prefetch_multiplier
_.application  # portal/wsgi.py: what gunicorn and WSGI_APPLICATION load
_.BalancedThreadWorker  # gunicorn.conf.py names it as worker_class (a string)
_.child_exit  # a gunicorn hook (gunicorn.conf.py)

# --- App configs, management commands (found by Django by their module and class names)
_.BillingConfig  # django app registry
_.CapacityConfig  # django app registry
_.PoliciesConfig  # django app registry
_.PortalConfig  # django app registry
_.QuotasConfig  # django app registry
_.SchedulingConfig  # django app registry
_.SimulatedConfig  # django app registry
_.default_auto_field  # AppConfig: primary key type
_.verbose_name  # AppConfig and model fields: names shown in the admin
_.Command  # manage.py: the class of each management command
_.add_arguments  # BaseCommand hook: the command's options
_.help  # BaseCommand: `manage.py help <command>`
_.requires_system_checks  # BaseCommand option
_.requires_migrations_checks  # BaseCommand option
_.stealth_options  # BaseCommand: options call_command takes that the parser does not (stdin)

# --- Model options and choices (read by the ORM and migrations; choices are stored values)
_.ordering  # Meta: default order; FilterSet: sortable fields
_.constraints  # Meta: database constraints
_.BINPACK  # quotas.Strategy choice
_.SPREAD  # quotas.Strategy choice
_.USAGE  # billing.ChargeBasis choice
_.HYBRID  # billing.ChargeBasis choice
_.FROZEN  # billing.Phase choice
_.GPU_RESERVED  # billing.ChargeKind choice
_.GPU_ACTIVE  # billing.ChargeKind choice
_.GPU_FROZEN  # billing.ChargeKind choice
_.CPU_FROZEN  # billing.ChargeKind choice
_.MEMORY_FROZEN  # billing.ChargeKind choice
_.VOID  # billing.InvoiceState choice
_.AUDITED  # policies.ViolationOutcome choice
_.GRANDFATHERED  # policies.ViolationOutcome choice
_.ERROR  # policies.ViolationOutcome choice
_.CAPPED  # policies.ViolationOutcome choice
_.PLACED  # policies.ViolationOutcome choice
_.PRIORITIZED  # policies.ViolationOutcome choice
_.KUBERNETES  # scheduling.BackendKind choice
_.NORMAL  # Kubernetes Event type, beside WARNING

# --- Model fields (database columns, shown by the admin, templates and the API)
_.author  # policies.PolicyVersion
_.budget_amount  # billing.BudgetFiring
_.cleaned_at  # scheduling.Admission
_.computed_at  # billing.UsageRecord
_.corrects  # billing.LedgerEntry
_.cpu_per_pod  # simulated.SimJob
_.created_at  # several models
_.created_by  # billing.RateCard
_.decided_at  # capacity.CapacityRequest
_.decided_by  # capacity.CapacityRequest and its serializer
_.decision_comment  # capacity.CapacityRequest
_.delivered_at  # scheduling.OutboxMessage (its admin; the delivery filters on it)
_.diff  # policies.PolicyVersion and its serializer
_.done_at  # simulated.SimJob
_.entry_count  # billing.Invoice (invoice page)
_.fired_at  # billing.BudgetFiring
_.granted_at  # policies.TeamApproval and its serializer
_.granted_by  # policies.TeamApproval and its serializer
_.input  # policies.PolicyViolation and its serializer
_.issued_by  # billing.Invoice
_.memory_gib_per_pod  # simulated.SimJob
_.mig_profiles  # quotas.Flavor and its serializer
_.notified  # billing.BudgetFiring
_.policy_version  # policies.PolicyViolation and its serializer
_.nomination  # scheduling.Workload (read as a row column: workers/rows.py, snapshot.py)
_.deferred_until  # scheduling.CycleMark (written and compared in queries: pacing.py)
_.preempt_kind  # scheduling.Workload
_.ran_at  # billing.ReconciliationRun
_.rate_card  # billing.LedgerEntry
_.ready_at  # simulated.SimJob
_.telemetry_source  # billing.UsageRecord
_.touched_at  # simulated.SimJob
_.updated_at  # several models
_.updated_by  # policies.Policy and its serializer
_.usage_record  # billing.LedgerEntry
_.efficiency  # billing.UsageRecord property (the tests read it) and API serializer fields

# --- Admin (django.contrib.admin reads these class attributes and calls these hooks)
_.list_display  # ModelAdmin: changelist columns
_.list_filter  # ModelAdmin: changelist filters
_.list_select_related  # ModelAdmin: changelist joins
_.search_fields  # ModelAdmin: changelist search
_.readonly_fields  # ModelAdmin: read-only form fields
_.autocomplete_fields  # ModelAdmin: autocomplete widgets
_.filter_horizontal  # ModelAdmin: many-to-many widget
_.inlines  # ModelAdmin: inline formsets
_.actions  # ModelAdmin: changelist actions (None: no bulk delete)
_.has_add_permission  # ModelAdmin hook
_.has_change_permission  # ModelAdmin hook
_.retry_now  # ModelAdmin action, named in OutboxMessageAdmin.actions
_.save_model  # ModelAdmin hook
_.save_related  # ModelAdmin hook
_.new_objects  # admin formsets: read by the admin's change message
_.changed_objects  # admin formsets: read by the admin's change message
_.deleted_objects  # admin formsets: read by the admin's change message

# --- DRF (views, permissions, authentication, serializer fields read by name)
_.permission_classes  # APIView
_.serializer_class  # GenericAPIView
_.filterset_class  # django-filter's DRF backend
_.PageNumberWithSize  # REST_FRAMEWORK's DEFAULT_PAGINATION_CLASS
_.page_size_query_param  # PageNumberPagination: the page size parameter's name
_.max_page_size  # PageNumberPagination: the largest page size a client may ask for
_.get_permissions  # APIView hook
_.has_permission  # BasePermission hook
_.authenticate_credentials  # TokenAuthentication hook
_.keyword  # TokenAuthentication: the Authorization header's keyword
_.HashedTokenAuthentication  # REST_FRAMEWORK's DEFAULT_AUTHENTICATION_CLASSES
_.patch  # APIView: the PATCH handler
_.validate_queue  # Serializer: validate_<field> hook
_.validate_flavor  # Serializer: validate_<field> hook
_.validate_month  # Serializer: validate_<field> hook
_.default_detail  # APIException: the detail when none is given
_.default_code  # APIException: the error code
_.get_reason  # SerializerMethodField: get_<field>
_.get_gpus  # SerializerMethodField
_.get_reason_text  # SerializerMethodField
_.get_queue_position  # SerializerMethodField
_.get_reasons  # SerializerMethodField
_.get_admission  # SerializerMethodField
_.get_admissions  # SerializerMethodField
_.get_events  # SerializerMethodField
_.get_pods  # SerializerMethodField
_.can_submit  # serializer field (queues API)
_.document  # serializer field (policy tests API)
_.filter_mine  # django-filter: named by the `mine` filter's method= (workloads list)
_.capacity_requests  # serializer field (approvals API)
_.estimate_total  # serializer field (workload cost API)
_.queue_position  # serializer field (workloads API)
_.ready_nodes  # serializer field (clusters API)
_.reserved_gpu_hours  # serializer field (usage API)
_.revoked  # serializer field (token revoke API)
_.run_rate_per_hour  # serializer field (budgets API)

# --- Forms and filters (Django forms and django-filter read fields and call hooks by name)
_.clean_command  # Form: clean_<field> hook
_.clean_sample  # Form: clean_<field> hook
_.clean_scope  # Form: clean_<field> hook
_.disabled  # form field attribute
_.duration_h  # form field
_.flavor_1  # form field
_.flavor_2  # form field
_.flavor_3  # form field
_.filter_queue  # FilterSet: the method of a filter
_.filter_flavor  # FilterSet: the method of a filter
_.submitted_after  # FilterSet field
_.submitted_before  # FilterSet field

# --- Read by templates
_.is_lead  # templates/portal/approvals.html
_.pending_ahead  # templates/scheduling/partials/feedback.html
_.pending_ahead_gpus  # templates/scheduling/partials/feedback.html
_.estimate_note  # templates/scheduling/partials/feedback.html
_.estimate_low  # templates/scheduling/partials/feedback.html
_.estimate_high  # templates/scheduling/partials/feedback.html
_.estimate_known  # templates/scheduling/partials/feedback.html
_.fits_now  # templates/scheduling/partials/feedback.html
_.fleet_free  # templates/scheduling/partials/feedback.html
_.estimated_start  # templates/scheduling/partials/feedback.html
_.replayed  # templates/policies/partials/replay.html and the replay API

# --- Set for Django, Celery or the Kubernetes client, which read them
_.sender  # signal handlers receive it by keyword
_.nudged  # scheduling.cycle task: passed by keyword by the nudge
_._result_cache  # QuerySet internals: a prefetched relation filled by hand
_._prefetch_done  # QuerySet internals: a prefetched relation filled by hand
_.adding  # Model._state: rows inserted by hand are marked saved
_.host  # kubernetes.client.Configuration
_.api_key  # kubernetes.client.Configuration
_.verify_ssl  # kubernetes.client.Configuration
_.ssl_ca_cert  # kubernetes.client.Configuration
_.retries  # kubernetes.client.Configuration

# --- Documentation in code

# --- scheduling
_.workload_status  # the backend protocol: one workload's status (tests read both backends by it)
_.list_workloads  # the backend protocol: what a cluster runs (tests read both backends by it)
_.unregister_submission_check  # extensions registry: the inverse of register (tests, reloads)
_.unregister_cycle_adjuster  # extensions registry: the inverse of register (tests, reloads)
_.nodes_changed  # SyncReport: what a pass did, returned to its caller (tests assert it)
_.rounds  # WatchReport: what a watch did, returned to its caller
_.resyncs  # WatchReport: what a watch did, returned to its caller (tests assert it)
_.ended  # WatchReport: what a watch did, returned to its caller
_.STUCK_PENDING  # EventCode: built by name, EventCode(f"STUCK_{state}") in fleet/maintenance.py
_.STUCK_RESERVED  # EventCode: built by name in fleet/maintenance.py
_.STUCK_RUNNING  # EventCode: built by name in fleet/maintenance.py
_.STUCK_PREEMPTING  # EventCode: built by name in fleet/maintenance.py
_.to_representation  # DRF: a serializer's output (WorkloadDetailSerializer: one function)

# --- portal.history: HistoryEntry fields the page template and the API serializer read by name
_.object_label  # templates/portal/partials/history_rows.html, HistoryEntrySerializer
_.source_label  # templates/portal/partials/history_rows.html
_.kind_label  # templates/portal/partials/history_rows.html
_.before_text  # templates/portal/partials/history_rows.html
_.after_text  # templates/portal/partials/history_rows.html
_.before_known  # templates/portal/partials/history_rows.html, HistoryEntrySerializer
_.filter_object  # django-filter: the history FilterSet names it in method="filter_object"
_.filter_type  # django-filter: the history FilterSet names it in method="filter_type"

# --- core.history (django-simple-history)
_._fill_source  # a pre_create_historical_record receiver (@receiver connects it)
_.HistorySourceMiddleware  # named in settings.MIDDLEWARE

# --- portal.errors: Django finds these by name
_.ErrorMiddleware  # named in settings.MIDDLEWARE
_.process_exception  # middleware hook: Django calls it with a view's exception
_.handler400  # the URLconf's error views (portal/urls.py)
_.handler403  # the URLconf's error views
_.handler404  # the URLconf's error views
_.handler500  # the URLconf's error views
_.baseline_rows  # called by the history migrations (vulture skips migrations)
_.schema_editor  # RunPython's (apps, schema_editor) signature
_.history_list_display  # SimpleHistoryAdmin: columns of an object's history page
_.revert_disabled  # SimpleHistoryAdmin: turns reverting off (it would go around the services)
_.to_python  # Django form fields: the history filters' parsing
_.field_class  # django-filter: the form field a filter uses
_.abstract  # Django Meta: the history base model is abstract
_.filter_backends  # DRF: the history list's filter backend

# --- Django system checks (registered by @checks.register, run by `manage.py check --deploy`)
_.check_password_hashers  # portal/checks.py
_.check_shared_cache  # portal/checks.py
_.check_sso_transport  # portal/checks.py

# --- portal.sso: single sign-on (docs/sso.md)
_.OIDC_RP_SCOPES  # setting read by mozilla-django-oidc's views
_.OIDC_TOKEN_USE_BASIC_AUTH  # setting read by mozilla-django-oidc's backend
_.OIDC_USE_PKCE  # setting read by mozilla-django-oidc's views
_.OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS  # setting read by mozilla-django-oidc's callback
_.LimitedLDAPBackend  # named in settings.AUTHENTICATION_BACKENDS (portal.sso.options)
_.OidcBackend  # named in settings.AUTHENTICATION_BACKENDS (portal.sso.options)
_.UserModel  # mozilla-django-oidc's backend reads it
_.OIDC_RP_IDP_SIGN_KEY  # mozilla-django-oidc's backend reads it (None: the JWKS's keys)
_.OIDC_OP_TOKEN_ENDPOINT  # mozilla-django-oidc's backend reads it
_.OIDC_OP_USER_ENDPOINT  # mozilla-django-oidc's backend reads it
_.OIDC_OP_AUTH_ENDPOINT  # mozilla-django-oidc's request view reads it
_.retrieve_matching_jwk  # mozilla-django-oidc's backend hook
_.get_or_create_user  # mozilla-django-oidc's backend hook
_.login_failure  # mozilla-django-oidc's callback view hook

# --- fractional GPUs
_.set_shares  # bench.fragmentation fixes the FGD baseline's mix to the whole trace's
_.clean_gpus  # Django form hook (PodSetForm)
_.error_count  # the tree editor template reads it
_.approvals_badge  # a context processor named in settings.TEMPLATES
_.live_poll  # a context processor named in settings.TEMPLATES
_.as_of  # a serializer field (WorkloadCostOut)
_.derived_pods  # serializer field (workloads API)
_.manifest_text  # form field
_.manifest_file  # form field
_.field_order  # Django Form option (the request forms: their own fields first)

# --- every GPU shape: the request form's resources and cost estimate
_.clean_resources  # Django form hook (PodSetForm)
_.cost_total  # templates/scheduling/partials/feedback.html
_.cost_per_hour  # serializer field (workload preview API)
_.gpus_billed  # serializer field (workload preview API)
# --- interactive sessions
_.idle_gpu_util_pct  # model field (Queue), read by values_list in scheduling/sessions.py
_.idle_timeout_min  # form field (the request forms)
_.time_limit_h  # form field (the request forms)
# --- capacity planner
_.file  # serializer field (TraceReplayInputSerializer: the upload, read from request.FILES)
_.parser_classes  # DRF APIView option (the trace replay API takes multipart and JSON)
_.inserted  # StoreReport (bench.eta, tests)
_.statements  # StoreReport (bench.eta, tests)
# --- the views users asked for (issue 15, item 5)
_.notifications_bell  # a context processor named in settings.TEMPLATES
_.planner_links  # a context processor named in settings.TEMPLATES
_.UserTimeZoneMiddleware  # named in settings.MIDDLEWARE
_.read_at  # a model field and a serializer field (notifications)
_.validate_time_zone  # DRF field validation hook (SettingsInput)
_.validate_muted_kinds  # DRF field validation hook (SettingsInput)
_.overall  # serializer field (UtilisationOutput)
_.metered_gpu_hours  # serializer field (UtilisationOutput)
_.fleet_pending  # serializer field (PendingOutput)
_.from_above  # serializer field (BorrowingGroupOutput)
_.position_in_queue  # serializer field (portal/lists_api.py)
_.position_in_fleet  # serializer field (portal/lists_api.py)
_.estimated_start_range  # serializer field (portal/lists_api.py)
# --- the hot cursor's query class (core/db.py): psycopg reads these attributes of its query
_._want_formats
_._parts
_.gpus_total  # written for the position SQL (scheduling/selectors.py position_sql)
SILENCED_SYSTEM_CHECKS  # a Django setting (portal/settings.py, SQLite only)
_.resource_label  # template attribute (billing/templates/billing/rates.html)
