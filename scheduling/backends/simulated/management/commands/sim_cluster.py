"""`manage.py sim_cluster NAME [--refuse|--accept] [--refuse-next N] [--fail-next N]
[--fail-job JOB]`: steer a simulated cluster, then print its switches and Jobs."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from scheduling.backends.simulated.models import SimJob
from scheduling.backends.simulated.services import (
    SimClusterError,
    sim_control_set,
    sim_job_fail,
)


class Command(BaseCommand):
    help = "Steer a simulated cluster: refuse or accept dispatches, fail workloads."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster", help="the simulated cluster's name")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--refuse", action="store_true", help="refuse every dispatch")
        mode.add_argument("--accept", action="store_true", help="accept dispatches again "
                          "(also clears --refuse-next)")
        parser.add_argument("--refuse-next", type=int, metavar="N",
                            help="refuse the next N dispatches")
        parser.add_argument("--fail-next", type=int, nargs="?", const=1, metavar="N",
                            help="the next N workloads created fail while running (default 1)")
        parser.add_argument("--fail-job", metavar="JOB", action="append", default=[],
                            help="make this Job (e.g. allot-w12-0) fail now; repeatable")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["cluster"]
        try:
            control = sim_control_set(
                cluster_name=name,
                refuse=True if options["refuse"] else (False if options["accept"] else None),
                refuse_next=0 if options["accept"] and options["refuse_next"] is None
                else options["refuse_next"],
                fail_next=options["fail_next"],
            )
            for job in options["fail_job"]:
                sim_job_fail(cluster_name=name, job_name=job)
                self.stdout.write(f"{job}: fails now")
        except SimClusterError as error:
            raise CommandError(str(error)) from error
        self.stdout.write(
            f"{name}: refuse={'yes' if control.refuse else 'no'} "
            f"refuse_next={control.refuse_next} fail_next={control.fail_next}"
        )
        now = timezone.now()
        for job in SimJob.objects.filter(cluster=control.cluster).order_by("created_at"):
            pods = job.pods_at(now)
            state = ("suspended" if pods.suspended else "failed" if pods.job_failed else
                     f"pending={pods.pending} running={pods.running} "
                     f"succeeded={pods.succeeded}")
            self.stdout.write(f"  {job.namespace}/{job.name}: {job.pods} pods, {state}")
