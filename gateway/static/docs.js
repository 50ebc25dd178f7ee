// The gateway's API docs (/docs): Swagger UI rendering /openapi.json, with the assets the gateway serves itself;
// nothing is loaded from anywhere else. Off loopback the token comes from ?token= (the page needs it too) or from
// the dashboard's tab.
"use strict";

(async function apiDocs() {
  const root = document.getElementById("api-docs");
  const fromUrl = new URLSearchParams(location.search).get("token");
  if (fromUrl) {  // kept for this tab, and out of the address bar and the browser's history
    sessionStorage.setItem("forage-token", fromUrl);
    history.replaceState(null, "", location.pathname);
  }
  const token = fromUrl || sessionStorage.getItem("forage-token");
  const auth = (headers) => { if (token) headers["Authorization"] = "Bearer " + token; return headers; };
  let spec;
  try {
    const resp = await fetch("/openapi.json", { headers: auth({}) });
    if (!resp.ok) throw new Error(`${resp.status} ${resp.statusText}`);
    spec = await resp.json();
  } catch (e) {
    root.textContent = "Could not load the API schema (/openapi.json): " + (e.message || e);
    return;
  }
  root.replaceChildren();
  SwaggerUIBundle({
    spec, domNode: root, layout: "BaseLayout", deepLinking: true, validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
    requestInterceptor: (req) => { auth(req.headers); return req; },  // "Try it out" calls this gateway, with the token
  });
})();
