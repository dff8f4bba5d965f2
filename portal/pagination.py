"""The API's lists come in pages: 50 items by default, `?page_size=N` for up to 1000 (a
client reading a whole list, such as `allot list --all`, then needs 20 times fewer requests)."""

from rest_framework.pagination import PageNumberPagination

MAX_PAGE_SIZE = 1000


class PageNumberWithSize(PageNumberPagination):
    """DRF's page numbers (`?page=N`), with `?page_size=N`: from 1 to MAX_PAGE_SIZE (more is
    given MAX_PAGE_SIZE; a value that is no whole number above 0, the default 50)."""

    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
