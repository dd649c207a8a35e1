// Starts GraphiQL on this server's /graphql: queries and mutations over
// POST, subscriptions over its websocket (graphql-transport-ws). A token
// goes in GraphiQL's Headers tab: {"Authorization": "Bearer <token>"}.
(function () {
  var http = location.origin + "/graphql";
  var ws = http.replace(/^http/, "ws");
  var fetcher = GraphiQL.createFetcher({ url: http, subscriptionUrl: ws });
  var root = ReactDOM.createRoot(document.getElementById("graphiql"));
  root.render(React.createElement(GraphiQL, { fetcher: fetcher, defaultEditorToolsVisibility: true }));
})();
