from django.urls import reverse


def test_home_requires_login(client, db):
    response = client.get(reverse("home"))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
